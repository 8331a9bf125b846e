"""ctest's entry for the Python client: run its pytest suite, failing (never skipping) when this
interpreter has no pytest. Arguments are passed to pytest."""
import os
import sys

try:
    import pytest
except ImportError:
    sys.exit(f"python_client: pytest is not installed for {sys.executable}: install Debian's python3-pytest "
             "(scripts/deps.sh does)")

HERE = os.path.dirname(os.path.abspath(__file__))
sys.exit(pytest.main(["-p", "no:cacheprovider", "--rootdir", os.path.dirname(HERE), "-q", HERE, *sys.argv[1:]]))
