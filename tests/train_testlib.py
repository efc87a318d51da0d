"""Helpers of the end-to-end training tests: tiny configs and the shared data.

Subprocesses of the entry points: `psmm_tf.testing.run_script` / `start_script`.
"""

import os
import tempfile
from pathlib import Path

# The real corpora are prepared as TFDS datasets in TFDS's default data dir: in the tests (and the
# trainers they start, which inherit it), a temporary one rather than ~/tensorflow_datasets. Set
# before psmm_tf imports TFDS, which reads it once.
os.environ.setdefault("TFDS_DATA_DIR", tempfile.mkdtemp(prefix="psmm_tests_tfds_"))

from psmm_tf.testing import tiny_config  # noqa: E402,F401 (shared with the tests beside the code)

REPO_ROOT = Path(__file__).resolve().parent.parent


def shared_data_dir():
    """The reference corpora: $PSMM_SHARED_DATA, else the `shared/data` sibling of the repo."""
    return Path(os.environ.get("PSMM_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))
