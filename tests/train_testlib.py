"""Helpers of the end-to-end training tests: tiny configs, shared data, trainer subprocesses."""

import os
import subprocess
import sys
import tempfile
from pathlib import Path

# The real corpora are prepared as TFDS datasets in TFDS's default data dir: in the tests (and the
# trainers they start, which inherit it), a temporary one rather than ~/tensorflow_datasets. Set
# before psmm_tf imports TFDS, which reads it once.
os.environ.setdefault("TFDS_DATA_DIR", tempfile.mkdtemp(prefix="psmm_tests_tfds_"))

from psmm_tf import configs  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parent.parent


def shared_data_dir():
    """The reference corpora: $PSMM_SHARED_DATA, else the `shared/data` sibling of the repo."""
    return Path(os.environ.get("PSMM_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))


def tiny_config(**train):
    """The `tiny` preset on a small synthetic corpus, with short epochs and evaluations."""
    fields = {"steps_per_epoch": 12, "max_epochs": 1, "checkpoint_every_steps": 5,
              "max_eval_tokens": 300}
    fields.update(train)
    return configs.get_preset("tiny").replace(train=fields,
                                              data={"synthetic_train_tokens": 4000})


def run_script(script, args, env=None, timeout=240):
    """Runs `python <script> <args>` from the repository root; returns the CompletedProcess."""
    child_env = dict(os.environ)
    child_env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + child_env.get("PYTHONPATH", "")
    child_env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    child_env.update(env or {})
    return subprocess.run([sys.executable, str(REPO_ROOT / script), *args], cwd=REPO_ROOT,
                          env=child_env, capture_output=True, text=True, timeout=timeout)


def start_script(script, args, env=None, **kwargs):
    """Starts `python <script> <args>` in the background; returns the Popen."""
    child_env = dict(os.environ)
    child_env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + child_env.get("PYTHONPATH", "")
    child_env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    child_env.update(env or {})
    return subprocess.Popen([sys.executable, str(REPO_ROOT / script), *args], cwd=REPO_ROOT,
                            env=child_env, **kwargs)
