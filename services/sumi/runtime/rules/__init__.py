"""The runtimes' pure part, no I/O: the frames and messages between the Host and a worker (`_protocol`)."""
