"""A finished (or running) training run loaded from its workdir: config, corpus and model.

Evaluation, the neural cache's evaluation and the benchmarks load runs through
`load_trained_run`; it lives apart from the report modules so none of them imports another.
"""

import dataclasses
from pathlib import Path

import keras

from psmm_tf import workdir as run_files
from psmm_tf.configs import ExperimentConfig
from psmm_tf.data import corpus_setup
from psmm_tf.models import rebuild_model


class RunLoadError(ValueError):
    """A run cannot be evaluated as asked: its vocabulary, corpus or split (nothing written)."""


@dataclasses.dataclass
class TrainedRun:
    """A run's config, corpus and model, loaded from its workdir.

    `model_source` is "best" or "latest" (`psmm_tf.workdir.MODEL_SOURCES`), `source` the file
    or checkpoint prefix the model was read from.
    """

    config: ExperimentConfig
    corpus: corpus_setup.Corpus
    model: keras.Model
    source: str
    model_source: str = "best"


def load_trained_run(workdir, data_dir=None, model_source="best", tfds_data_dir=None,
                     mixed_precision=None):
    """Loads a run's config, corpus and the model `model_source` names.

    Args:
        workdir: str or path. A training run's directory (see `psmm_tf.workdir`).
        data_dir: optional str. Where the corpus files are now, if not where the run read them.
        model_source: "best" (`model.keras`, the best model by validation perplexity) or
            "latest" (the newest readable checkpoint).
        tfds_data_dir: optional str. Where the corpus is prepared as a TFDS dataset, if not
            where the run's config says (`DataConfig.tfds_data_dir`).
        mixed_precision: optional Keras dtype policy (`TrainConfig.mixed_precision`'s
            choices) to compute in instead of the run's own, e.g. "float32" for a run trained
            under "mixed_bfloat16" (the same float32 weights); the returned config says it.

    Returns:
        A `TrainedRun`.

    Raises:
        RunLoadError: `vocab.txt` is not the run's (its `vocab.sha256`), `data_dir` is given for
            a synthetic run (whose corpus is regenerated in the workdir, never in a data
            folder), the corpus cannot be read, `config.json` or `model.keras` is damaged or
            missing ("best"), or there is no readable checkpoint ("latest").
    """
    run_files.check_model_source(model_source)
    workdir = Path(workdir)
    config = run_files.load_config(workdir, error=RunLoadError)
    if data_dir is not None:
        if config.data.dataset == "synthetic":
            raise RunLoadError(
                f"data_dir={data_dir}: the run in {workdir} trained on the synthetic corpus, "
                "which is regenerated in its workdir; a data folder is neither read nor "
                "written for it.")
        config = config.replace(data={"data_dir": str(data_dir)})
    if tfds_data_dir is not None:
        config = config.replace(data={"tfds_data_dir": str(tfds_data_dir)})
    vocabulary = run_files.load_vocabulary(workdir, error=RunLoadError)
    try:
        corpus = corpus_setup.load_corpus(
            config.data, scratch_dir=workdir / run_files.SYNTHETIC_DATA_DIR,
            vocabulary=vocabulary, max_word_length=config.model.spelling_length)
    except (FileNotFoundError, NotADirectoryError, PermissionError, ValueError) as err:
        raise RunLoadError(f"Corpus of {workdir} (dataset={config.data.dataset!r}, data_dir="
                           f"{config.data.data_dir}): {err}") from None
    model, source = run_files.load_model(workdir, model_source, config, vocabulary,
                                         error=RunLoadError)
    if mixed_precision is not None and mixed_precision != config.train.mixed_precision:
        try:
            config = config.replace(train={"mixed_precision": mixed_precision})
            model = rebuild_model(model, mixed_precision)
        except ValueError as err:
            raise RunLoadError(f"mixed_precision={mixed_precision!r} for {workdir}: "
                               f"{err}") from None
    return TrainedRun(config=config, corpus=corpus, model=model, source=source,
                      model_source=model_source)
