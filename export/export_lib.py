"""psmm-export's library: load a trained model from its source and write a TF Serving export.

`load_model` reads a training workdir (its "best" `model.keras` or its "latest" checkpoint,
named by `model_source`), a `.keras` file or a checkpoint; `with_cache` adds a neural cache;
`export` writes `<export_base>/<version>/` (a plain SavedModel with the signatures of
`psmm_tf.export.serving_module`, the vocabulary as an asset, warmup requests in
`assets.extra/tf_serving_warmup_requests`, the run's config in `assets.extra/config.json`
and, with a cache, `assets.extra/neural_cache.json`), through a hidden temporary folder beside
the versions renamed into place at the end; `describe_signatures` lists what was written.
The binary is `psmm_tf.export.export_saved_model` (psmm-export).
"""

import contextlib
import errno
import json
import os
import shutil
import tempfile

import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2

import psmm_tf.models  # noqa: F401  (registers the custom Keras objects for load_model)
from psmm_tf import workdir as run_files
from psmm_tf.configs import ExperimentConfig
from psmm_tf.data import Vocabulary
from psmm_tf.evaluation.neural_cache import (
    DEFAULT_LAMBDA,
    DEFAULT_THETA,
    CacheSettings,
    NeuralCache,
    check_cache_settings,
)
from psmm_tf.export import cache, serving_module, warmup
from psmm_tf.export.serving_module import ServingModule
from psmm_tf.export.versions import MAX_VERSION, version_folders

DEFAULT_CACHE_THETA, DEFAULT_CACHE_LAMBDA = DEFAULT_THETA, DEFAULT_LAMBDA  # NeuralCache's
# The run's config inside an export (`assets.extra/`), as the run's own file is named.
EXPORT_CONFIG_FILE = run_files.CONFIG_FILE
# The largest request limit (`max_tokens`): the serving checks compare it with int32 sizes
# (`tf.size`), where a larger one wraps round and refuses every request.
MAX_REQUEST_TOKENS = 2**31 - 1
# The file that makes a folder a SavedModel (a version folder of an export base).
SAVED_MODEL_FILE = "saved_model.pb"


def check_export_base(export_base, version=None):
    """Refuses an `export_base` that is a file, or itself a SavedModel (a version folder: it
    holds saved_model.pb), where a version would be written inside another version, or (without
    a `version`) one that holds TF Serving's largest version; writes nothing.

    Returns:
        The version to write: `version`, or the base's `next_version`.

    Raises:
        ValueError: naming `export_base` (and for a version folder its parent, the folder of
            the versions).
    """
    if os.path.exists(export_base) and not os.path.isdir(export_base):
        raise ValueError(f"--export_base={export_base} is a file; expected the folder of the "
                         "versions (or a path that does not exist yet).")
    if os.path.isfile(os.path.join(export_base, SAVED_MODEL_FILE)):
        parent = os.path.dirname(os.path.normpath(os.path.abspath(export_base)))
        raise ValueError(
            f"--export_base={export_base} is a SavedModel version folder (it holds "
            f"{SAVED_MODEL_FILE}); expected the folder of the versions: its parent, "
            f"--export_base={parent}?")
    return next_version(export_base) if version is None else version


def check_max_tokens(max_tokens):
    """Refuses a request limit outside [2, 2**31 - 1] (`MAX_REQUEST_TOKENS`)."""
    if not 2 <= int(max_tokens) <= MAX_REQUEST_TOKENS:
        raise ValueError(
            f"max_tokens (--max_request_tokens) must be an integer in [2, 2**31 - 1] (a "
            f"one-word text and its <eos>, up to int32 request sizes), got {max_tokens}.")


def cache_settings(window=None, theta=None, lam=None):
    """The `CacheSettings` of the `--cache_*` flags, or None without `--cache_window`.

    Raises:
        ValueError: naming the flag that is invalid, or given without `--cache_window`.
    """
    if window is None:
        given = [f"--cache_{name}" for name, value in (("theta", theta), ("lambda", lam))
                 if value is not None]
        if given:
            raise ValueError(f"{' and '.join(given)} given without --cache_window: the cache "
                             "needs its window (the number of previous hidden states).")
        return None
    theta = DEFAULT_CACHE_THETA if theta is None else theta
    lam = DEFAULT_CACHE_LAMBDA if lam is None else lam
    check_cache_settings(window, (theta,), (lam,),
                               ("--cache_window", "--cache_theta", "--cache_lambda"))
    return CacheSettings(window, theta, lam)


def with_cache(model, settings):
    """`model` with the neural cache of `settings` (a `CacheSettings`), or `model` if None."""
    if settings is None:
        return model
    return NeuralCache(model, window=settings.window, theta=settings.theta, lam=settings.lam)



def _read_config(path):
    """The text of config file `path`, checked to be an `ExperimentConfig`'s JSON."""
    text = run_files.read_text_file(path, "a training run's config.json")
    try:
        ExperimentConfig.from_json(text)
    except (ValueError, TypeError, KeyError, AttributeError) as err:
        raise ValueError(f"Config {path} is not a training run's config.json ({type(err).__name__}"
                         f": {err}).") from None
    return text


def _check_config_matches_run(config_json, checkpoint):
    """Refuses a --config whose model is not the one of the checkpoint's run (its config.json).

    A checkpoint restores partially into a smaller model (an LSTM from a PSMM's checkpoint)
    without an error, so the config of the run the checkpoint belongs to is compared.
    """
    folder = checkpoint if os.path.isdir(checkpoint) else os.path.dirname(checkpoint)
    run_config = os.path.join(os.path.dirname(os.path.abspath(folder)), run_files.CONFIG_FILE)
    if not os.path.isfile(run_config):
        return
    try:  # as config.json holds them: a model hyperparameter by its own name
        run_model = json.loads(ExperimentConfig.from_json(_read_config(run_config)).to_json())
    except ValueError:
        return
    run_model, given = run_model["model"], json.loads(
        ExperimentConfig.from_json(config_json).to_json())["model"]
    fields = [name for name in {*given, *run_model}
              if name != "seed" and given.get(name) != run_model.get(name)]
    if fields:
        details = ", ".join(f"model.{name}: {run_model.get(name)!r} in the run, "
                            f"{given.get(name)!r} in --config" for name in sorted(fields))
        raise ValueError(f"--config does not describe the model of the checkpoint's run "
                         f"{run_config} ({details}); give that run's config.json.")


def load_model(workdir=None, keras_model=None, checkpoint=None, config=None, vocab=None,
               model_source=None):
    """The model to export, its vocabulary file, config JSON (or None) and where it came from.

    Args:
        workdir: str. A training workdir: `config.json`, `vocab.txt`, and the model
            `model_source` names.
        keras_model: str. A `.keras` file (then `vocab` is required, `config` optional).
        checkpoint: str. A checkpoint prefix or folder (then `config` and `vocab` required).
        config, vocab: str. Override the workdir's files.
        model_source: with `workdir`: "best" (its `model.keras`) or "latest" (its newest
            readable checkpoint). None: "best" for a finished run (its results.json and
            model.keras: the model its results report, gate calibration included) and for an
            input-to-output gate run (`model.base_model` set in its config), whose model.keras
            holds the frozen model and the gate; "latest" for a run not finished.

    Returns:
        `(model, vocab_path, config_json, source)`: `source` names what was loaded, e.g.
        "latest (latest checkpoint): <workdir>/checkpoints/ckpt-20".

    Raises:
        ValueError: a bad combination of sources, or a vocabulary that is not the one of the
            training run the model comes from (its `vocab.sha256`; the run's folder is the
            workdir, the `.keras` file's folder, or the checkpoint folder's parent).
    """
    if sum(x is not None for x in (workdir, keras_model, checkpoint)) != 1:
        raise ValueError("Give exactly one of --workdir, --keras_model and --checkpoint.")
    if model_source is not None and workdir is None:
        raise ValueError("--model_source chooses the model of a --workdir; --keras_model and "
                         "--checkpoint name their model themselves.")
    if workdir is not None:
        config = config or os.path.join(workdir, run_files.CONFIG_FILE)
        vocab = vocab or os.path.join(workdir, run_files.VOCAB_FILE)
        for path in (config, vocab):
            if not os.path.isfile(path):
                raise FileNotFoundError(f"--workdir={workdir}: no {path}; expected a training "
                                        "run's folder (config.json, vocab.txt, checkpoints/).")
    if vocab is None:
        raise ValueError("--vocab is required with --keras_model and --checkpoint.")
    run_files.check_vocabulary(vocab, _run_folder(workdir, keras_model, checkpoint))
    config_json = None
    if config is not None:
        config_json = _read_config(config)
    if workdir is not None:
        model_source = model_source or default_model_source(config_json, workdir)
        run_files.check_model_source(model_source)
        keras_model, checkpoint = _workdir_source(workdir, model_source, config_json)
    if keras_model is not None:
        model = run_files.read_model_file(keras_model)
        run_files.check_loaded_model(
            model, keras_model,
            None if config_json is None else ExperimentConfig.from_json(config_json),
            Vocabulary.load(vocab))
        source = run_files.describe_model_source("best", keras_model)
    else:
        if config_json is None:
            raise ValueError("--config is required with --checkpoint.")
        _check_config_matches_run(config_json, checkpoint)
        model, restored = run_files.restore_model(
            ExperimentConfig.from_json(config_json), Vocabulary.load(vocab), checkpoint,
            name=f"--checkpoint={checkpoint}")
        source = run_files.describe_model_source("latest", restored)
    return model, vocab, config_json, source


def default_model_source(config_json, workdir=None):
    """psmm-export's model of a workdir when --model_source is not given.

    "best" (model.keras) for a finished run (its results.json written): the model its results
    report, with the gate's calibration, which train_lib fits after the last checkpoint and
    saves in model.keras only (without it a character-input run's newest checkpoint scores
    far worse than its model.keras). "best" for an input-to-output gate run
    too (its checkpoints need the base model's file, which may have moved; its model.keras
    holds it all). "latest" (the newest checkpoint) for a run still training or stopped before
    its end.
    """
    if json.loads(config_json).get("model", {}).get("base_model"):
        return "best"
    if workdir is not None and all(
            os.path.isfile(os.path.join(workdir, name))
            for name in (run_files.RESULTS_FILE, run_files.MODEL_FILE)):
        return "best"
    return "latest"


def _run_folder(workdir, keras_model, checkpoint):
    """The training run's folder of the model source (where its `vocab.sha256` would be)."""
    if workdir is not None:
        return workdir
    if keras_model is not None:
        return os.path.dirname(os.path.abspath(keras_model))
    folder = checkpoint if os.path.isdir(checkpoint) else os.path.dirname(checkpoint)
    return os.path.dirname(os.path.abspath(folder))


def _workdir_source(workdir, model_source, config_json):
    """`(keras_model, checkpoint)` of a workdir's `model_source`."""
    if model_source == "latest":
        checkpoints = os.path.join(workdir, run_files.CHECKPOINT_DIR)
        if not os.path.isdir(checkpoints):  # named as the run's folder: no --checkpoint given
            what = "is not a folder" if os.path.lexists(checkpoints) else "does not exist"
            raise FileNotFoundError(
                f"{checkpoints} {what}: --model_source=latest exports the newest checkpoint of "
                f"the run's checkpoint folder; use --model_source=best for its model.keras.")
        return None, checkpoints
    path = os.path.join(workdir, run_files.MODEL_FILE)
    if not os.path.isfile(path):
        gate = json.loads(config_json).get("model", {}).get("base_model")
        what = (f"{workdir} is an input-to-output gate run (its config sets model.base_model), "
                "exported from its model.keras" if gate else "--model_source=best exports "
                f"{workdir}'s model.keras")
        raise FileNotFoundError(
            f"{what}, and {path} does not exist (the trainer writes it at its first "
            "validation); use --checkpoint with --config and --vocab instead.")
    return path, None


def next_version(export_base):
    """1 + the largest version in `export_base` (1 if none).

    Raises:
        ValueError: the largest is TF Serving's largest version (2**63 - 1), naming it.
    """
    if not tf.io.gfile.isdir(export_base):
        return 1
    latest = max(version_folders(tf.io.gfile.listdir(export_base)), default=0)
    if latest == MAX_VERSION:
        raise ValueError(f"--export_base={export_base} holds version {latest}, TF Serving's "
                         f"largest (int64): no next version; give --model_version=N for a free "
                         f"one.")
    return latest + 1


def export(model, vocabulary_file, export_base, version=None, model_name="psmm", config_json=None,
           max_tokens=serving_module.DEFAULT_MAX_TOKENS):
    """Writes the SavedModel of `model` to `<export_base>/<version>/`; returns that path.

    Args:
        model: what `ServingModule` serves: a language model, an `InputOutputGateLM`, or a
            `NeuralCache` over either (see `with_cache`).
        vocabulary_file: str. export_base: str. version: optional int (default: the next).
        model_name: str. The name in the warmup requests.
        config_json: optional str. The run's config, copied to `assets.extra/config.json`.
        max_tokens: int. Most tokens of one request (see `ServingModule`).

    The version folder is readable by every user (0755), as a TF Serving process running as
    another user needs.

    Raises:
        FileExistsError: if the version exists.
        FileNotFoundError: `export_base` is a symbolic link that leads nowhere.
        ValueError: a version < 1, `max_tokens` outside [2, 2**31 - 1] (`check_max_tokens`),
            or an `export_base` that is a version folder itself or, without `version`, holds
            TF Serving's largest version (`check_export_base`).

    A failed export removes its temporary folder and the folders it created for
    `export_base`.
    """
    check_max_tokens(max_tokens)
    version = int(check_export_base(export_base, version))
    if os.path.islink(export_base) and not os.path.exists(export_base):
        raise FileNotFoundError(errno.ENOENT, "a symbolic link that leads nowhere (a loop, or "
                                "its target is missing); expected the folder of the versions",
                                export_base)
    if not 1 <= version <= MAX_VERSION:
        raise ValueError(f"version must be an integer in [1, 2**63) (TF Serving's int64 "
                         f"versions), got {version}.")
    final = os.path.join(export_base, str(version))
    if os.path.exists(final):
        raise FileExistsError(f"{final} exists; versions are never overwritten.")
    created = _missing_folders(export_base)
    os.makedirs(export_base, exist_ok=True)
    temporary = tempfile.mkdtemp(prefix=f".tmp-{version}-", dir=export_base)
    try:
        module = ServingModule(model, vocabulary_file, max_tokens=max_tokens)
        tf.saved_model.save(module, temporary, signatures=module.signatures())
        extra = os.path.join(temporary, "assets.extra")
        os.makedirs(extra)
        requests = warmup.warmup_inputs(
            Vocabulary.load(vocabulary_file).tokens,
            module.num_layers,
            module.hidden_dim,
            module.memory_size,
            module.eos_id,
            module.cache.window if module.cache else None,
            max_tokens=module.max_tokens,
        )
        warmup.write_warmup_file(os.path.join(extra, warmup.WARMUP_FILE), model_name, requests)
        if config_json is not None:
            with open(os.path.join(extra, EXPORT_CONFIG_FILE), "w", encoding="utf-8") as f:
                f.write(config_json)
        if module.cache is not None:
            with open(os.path.join(extra, cache.SETTINGS_FILE), "w", encoding="utf-8") as f:
                f.write(cache.settings_json(module.cache))
        os.chmod(temporary, 0o755)  # mkdtemp's 0700 would hide it from a server's user
        if os.path.exists(final):
            raise FileExistsError(f"{final} appeared during the export; not overwriting it.")
        os.rename(temporary, final)
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        for folder in created:  # a failed export leaves no folder it made behind
            with contextlib.suppress(OSError):
                os.rmdir(folder)
        raise
    return final


def _missing_folders(path):
    """The folders `os.makedirs(path)` would create, deepest first."""
    missing = []
    path = os.path.abspath(path)
    while not os.path.lexists(path):
        missing.append(path)
        path = os.path.dirname(path)
    return missing


def describe_signatures(export_dir):
    """The signatures of a SavedModel as text: inputs and outputs with dtypes and shapes."""
    saved_model = saved_model_pb2.SavedModel()
    with open(os.path.join(export_dir, "saved_model.pb"), "rb") as f:
        saved_model.ParseFromString(f.read())
    lines = []
    settings_file = os.path.join(export_dir, "assets.extra", cache.SETTINGS_FILE)
    if os.path.isfile(settings_file):
        with open(settings_file, encoding="utf-8") as f:
            settings = json.load(f)
        lines.append(f"neural cache: window={settings['window']} theta={settings['theta']} "
                     f"lambda={settings['lambda']} (p = (1 - lambda) p_model + lambda p_cache; "
                     f"state {', '.join(settings['state'])})")
    for name, signature in sorted(saved_model.meta_graphs[0].signature_def.items()):
        if name.startswith("__"):  # __saved_model_init_op: the table initialisers
            continue
        lines.append(f"signature {name!r} ({signature.method_name}):")
        for kind, tensors in (("input", signature.inputs), ("output", signature.outputs)):
            for key, info in sorted(tensors.items()):
                if kind == "input":  # the signature accepts any shape; the model checks it
                    rank_shape = serving_module.INPUT_RANKS.get(key, (None, "?"))[1]
                    shape = (f"{rank_shape} {tf.dtypes.as_dtype(info.dtype).name}, any rank "
                             "accepted and checked")
                else:
                    dims = [d.size if d.size >= 0 else None for d in info.tensor_shape.dim]
                    shape = f"{tuple(dims)} {tf.dtypes.as_dtype(info.dtype).name}"
                lines.append(f"  {kind:6s} {key:14s} {shape}  [{info.name}]")
    return "\n".join(lines)
