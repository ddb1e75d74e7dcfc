"""The control plane's pure part, no I/O: its state and fold (`state`), its decisions (`_decide`) and
the Forms' validators (`forms`)."""
