"""psmm_tf: pointer sentinel mixture language models in TensorFlow/Keras."""

import pathlib

from setuptools import find_packages, setup

README = pathlib.Path(__file__).with_name("README.md")

setup(
    name="psmm_tf",
    version="0.1.0",
    description="Pointer sentinel mixture language models (Merity et al. 2016) for TF/Keras",
    long_description=README.read_text(encoding="utf-8") if README.exists() else "",
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.10",
    packages=find_packages(include=["psmm_tf", "psmm_tf.*", "trainers", "export"]),
    include_package_data=True,
    install_requires=[
        "tensorflow>=2.16",
        "keras>=3.3",
        "tensorflow-datasets>=4.9",
        # tensorflow-datasets imports it at build time without declaring it on every platform.
        "importlib_resources",
        "absl-py",
        "numpy",
        # PredictionLog protos for the SavedModel warmup file and the gRPC scoring client.
        "tensorflow-serving-api",
        # The Figure 4 chart of trainers/evaluate.py.
        "matplotlib",
    ],
    extras_require={"test": ["pytest>=7", "pytest-xdist"], "dev": ["ruff"]},
    entry_points={
        "console_scripts": [
            "psmm-train=trainers.train:main",
            "psmm-evaluate=trainers.evaluate:main",
            "psmm-export=export.export_saved_model:main",
            "psmm-score=export.score:main",
        ]
    },
)
