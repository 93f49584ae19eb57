"""What several test packages share: fake embedders, fake chat servers on loopback, and
knowledge bases over the sample documents. Importable as ``support`` (``pythonpath`` in
pyproject.toml); for users' own tests :mod:`shelfhand.testing` has the public fakes."""
