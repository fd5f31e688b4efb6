"""Buffered asynchronous FL: the virtual-clock schedule, job durations and the asynchronous trainer."""
