"""The only place lightfed touches other libraries' private attributes; each use has a test in tests/test_adapters.py that fails when the library changes."""
