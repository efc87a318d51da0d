"""Training an input-to-output gate on a trained run's model (Takase et al. 2017).

The gate `g_t = sigmoid(W e'(x_t) + b)` multiplies the frozen model's vocabulary logits,
`p(w_{t+1}) = softmax(g_t * (U h_t + b_U))`; only `e'`, `W` and `b` are trained, with Adam at
learning rate 0.001 (the paper's setting), on the base run's corpus and vocabulary.

Example:
```python
# Needs a finished psmm-train run in /runs/ptb_psmm.
from psmm_tf.training import train_lib
from psmm_tf.training.gate_training import input_output_gate_config

config = input_output_gate_config("/runs/ptb_psmm")
train_lib.run(config, "/runs/ptb_psmm_gate")   # psmm-evaluate --workdir=/runs/ptb_psmm_gate
```
"""

from pathlib import Path

from psmm_tf import workdir as run_files
from psmm_tf.training import run_setup


def input_output_gate_config(base_workdir, embedding_dim=300, dropout=0.5, learning_rate=1e-3,
                             max_epochs=None, seed=None, steps_per_epoch=None):
    """The config of a run that trains an input-to-output gate on `base_workdir`'s model.

    The base run's data and model settings are kept (its corpus, vocabulary and sizes); the
    model becomes its `model.keras`, frozen, with a new gate. Training uses Adam at
    `learning_rate`; the learning-rate schedule, patience, gradient clipping and the windowing
    scheme stay the base run's.

    Args:
        base_workdir: str or path. A finished (or at least once validated) training run: it
            must hold `config.json`, `vocab.txt` and `model.keras`.
        embedding_dim: int. Width of the gate's embedding `e'` (paper: 300).
        dropout: float in [0, 1). Dropout on `e'` in training (paper: 0.5).
        learning_rate: float. Adam's initial learning rate (paper: 0.001).
        max_epochs: optional int. Default: the base run's.
        seed: optional int. Seed of the gate's initialisation and dropout, and of the run.
            Default: the base run's.
        steps_per_epoch: optional int. Default: the base run's.

    Returns:
        An `ExperimentConfig` for `psmm_tf.training.train_lib.run`.

    Raises:
        FileNotFoundError: `base_workdir` lacks one of the three files.
        ValueError: the base run is itself an input-to-output gate run, its config.json is
            damaged (naming it, as `workdir.load_config`), it is still training (a
            `run_setup.RunRefusedError` naming it and the pid holding its lock), or a bad
            value.
    """
    base_workdir = Path(base_workdir).absolute()
    for name in (run_files.CONFIG_FILE, run_files.VOCAB_FILE, run_files.MODEL_FILE):
        if not (base_workdir / name).is_file():
            raise FileNotFoundError(
                f"{base_workdir} has no {name}: the input-to-output gate needs a trained run "
                f"(config.json, vocab.txt and model.keras, which is written after the first "
                f"epoch's validation).")
    run_setup.check_not_training(
        base_workdir, "Wait for it to end before training a gate on its model, or train the "
        "gate on a copy of the run (its config.json, vocab.txt and model.keras) kept "
        "elsewhere.")
    base = run_files.load_config(base_workdir)
    if base.model.base_model is not None:
        raise ValueError(
            f"{base_workdir} is already an input-to-output gate run (on "
            f"{base.model.base_model}); train the gate on the run of the model itself.")
    model = {"base_model": str(base_workdir / run_files.MODEL_FILE),
             "gate_embedding_dim": embedding_dim, "gate_dropout": dropout}
    train = {"optimizer": "adam", "learning_rate": learning_rate}
    if max_epochs is not None:
        train["max_epochs"] = max_epochs
    if steps_per_epoch is not None:
        train["steps_per_epoch"] = steps_per_epoch
    if seed is not None:
        model["seed"] = seed
        train["seed"] = seed
    return base.replace(model=model, train=train)
