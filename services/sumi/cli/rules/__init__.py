"""The CLI's pure part: reading a manifest into the resources it declares (`_manifest`), no I/O."""
