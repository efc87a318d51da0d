"""psmm_tf: pointer sentinel mixture language models in TensorFlow/Keras.

Users import only `psmm_tf.*`: the repository's top-level `trainers/` and `export/` folders are
installed as `psmm_tf.trainers` and `psmm_tf.export` (`package_dir`). Unit tests (`*_test.py`)
and the test helpers (`testing.py`) stay in the repository: they are left out of the wheel.
"""

import pathlib
import re

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

HERE = pathlib.Path(__file__).parent
README = HERE / "README.md"
# The single source of the version: psmm_tf/__init__.py (read, not imported: no TensorFlow here).
VERSION = re.search(r'^__version__ = "([^"]+)"$',
                    (HERE / "psmm_tf" / "__init__.py").read_text(encoding="utf-8"), re.M).group(1)

# Folders of the repository installed under another package name.
PACKAGE_DIR = {"psmm_tf.trainers": "trainers", "psmm_tf.export": "export"}


def _is_test_only(module):
    return module.endswith("_test") or module == "testing"


class BuildPyWithoutTests(build_py):
    """build_py that leaves the unit tests and test helpers out of the wheel."""

    def find_package_modules(self, package, package_dir):
        return [(pkg, module, path)
                for pkg, module, path in super().find_package_modules(package, package_dir)
                if not _is_test_only(module)]


setup(
    name="psmm_tf",
    version=VERSION,
    description="Pointer sentinel mixture language models (Merity et al. 2016) for TF/Keras",
    long_description=README.read_text(encoding="utf-8") if README.exists() else "",
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    license_files=["LICENSE"],
    classifiers=[
        "Development Status :: 3 - Alpha",
        "Intended Audience :: Science/Research",
        "Intended Audience :: Developers",
        "License :: OSI Approved :: Apache Software License",
        "Operating System :: OS Independent",
        "Programming Language :: Python :: 3",
        "Programming Language :: Python :: 3 :: Only",
        "Programming Language :: Python :: 3.11",
        "Programming Language :: Python :: 3.12",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
        "Topic :: Text Processing :: Linguistic",
    ],
    keywords="language model, pointer sentinel, LSTM, TensorFlow, Keras, TF Serving",
    project_urls={
        "Paper": "https://arxiv.org/abs/1609.07843",
    },
    python_requires=">=3.11",
    packages=find_packages(include=["psmm_tf", "psmm_tf.*"]) + sorted(PACKAGE_DIR),
    package_dir=PACKAGE_DIR,
    # Example TF Serving models.config and batching parameters beside the exporter; the
    # checksums of the corpora's archives, which TFDS reads beside the builders; the native
    # kernels' sources, compiled on first use.
    package_data={"psmm_tf.export": ["models.config", "batching_parameters.txt"],
                  "psmm_tf.data": ["checksums.tsv"],
                  "psmm_tf.native": ["*.cc", "*.h"]},
    cmdclass={"build_py": BuildPyWithoutTests},
    install_requires=[
        # Tested with TensorFlow 2.21; keras-hub 0.32 needs tensorflow-text >= 2.20.1, whose
        # release X.Y needs TensorFlow X.Y. The upper bound is shared with
        # tensorflow-serving-api, whose release X.Y requires tensorflow>=X.Y: without it,
        # installing a newer serving API would move TensorFlow past the tested versions.
        "tensorflow>=2.20,<2.22",
        # PredictionLog protos for the SavedModel warmup file and the gRPC scoring client.
        "tensorflow-serving-api>=2.20,<2.22",
        "keras>=3.15",  # keras-hub 0.32's floor
        # The tasks are keras-hub CausalLMs (generate, samplers, presets, string pipelines);
        # its preprocessing runs on TensorFlow (tensorflow-text comes with it).
        "keras-hub>=0.32,<1.0",
        "tensorflow-datasets>=4.9",
        # tensorflow-datasets imports it at build time without declaring it on every platform.
        "importlib_resources",
        "absl-py",
        "numpy",
    ],
    extras_require={
        # keras.callbacks.TensorBoard in `fit` (tf.summary.scalar needs it; TensorFlow 2.21 no
        # longer installs it). psmm-train writes its TensorBoard logs without it.
        "tensorboard": ["tensorboard>=2.16"],
        # The Figure 4 chart (frequency_buckets.png) of psmm-evaluate --baseline_workdir.
        "plots": ["matplotlib"],
        # setuptools and wheel: tests/packaging_test.py builds the wheel without isolation.
        "test": ["pytest>=7", "pytest-xdist", "matplotlib", "setuptools>=61", "wheel", "jax[cpu]"],
        "dev": ["ruff"],
    },
    entry_points={
        "console_scripts": [
            "psmm-train=psmm_tf.trainers.train:main",
            "psmm-evaluate=psmm_tf.trainers.evaluate:main",
            "psmm-export=psmm_tf.export.export_saved_model:main",
            "psmm-score=psmm_tf.export.score:main",
        ]
    },
)
