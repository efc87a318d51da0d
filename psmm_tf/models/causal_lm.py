"""keras-hub's `CausalLM` for recurrent tasks: compile/fit, predict, generate and presets.

keras-hub's `CausalLM` gives `generate()` (prompt preprocessing, samplers, stop tokens,
postprocessing, compiled on every backend), `fit`/`predict` on raw strings through the
preprocessor, and `from_preset`. What it leaves to each model is done here for the package's
recurrent tasks, whose call takes and returns an LSTM state and a pointer memory and whose
output is a dict (softmax logits, attention, gate):

- the loss: psmm-train's objective per target (the mixture's negative log-likelihood, eq. 9's
  pointer term at psmm-train's weight; the softmax cross-entropy without a pointer), averaged
  over the targets (`compute_loss`);
- metrics and `predict` see the mixture's log-probabilities `(batch_size, T, V)`, pointer
  included, never the softmax's logits alone;
- `generate_step` reads the prompt once and then one token per step, carrying the state and the
  memory of the last `L - 1` hidden states, so the pointer copies words of the prompt.

What `fit` does with state and memory: every row of a batch is a text of its own, read from the
zero state with an empty memory, as keras-hub's causal LMs read theirs. psmm-train's trainer
instead carries both across the consecutive windows of each stream (truncated BPTT, the pointer
seeing across window boundaries); docs/design_notes.md compares the two.
"""

import os
import zipfile

import keras
import keras_hub
from keras import ops

from psmm_tf import native
from psmm_tf.configs import TrainConfig
from psmm_tf.losses.pointer_sentinel_loss import PointerSentinelLoss

# A preset folder holds the model's `.keras` file and its metadata; a psmm-train run folder
# (`psmm_tf.workdir`) holds the same model file, so it loads as a preset too.
MODEL_FILE = "model.keras"
PRESET_METADATA_FILE = "metadata.json"


def read_model_file(path, error=ValueError, advice=""):
    """The model in the `.keras` file `path`: the package's one reader of `.keras` files.

    Raises:
        `error`: the file is truncated, damaged or not a `.keras` file; the message names it
            and ends with `advice`.
    """
    try:  # psmm_tf.models, imported before this module, registers the classes
        return keras.saving.load_model(path)
    except (ValueError, TypeError, KeyError, OSError, zipfile.BadZipFile) as err:
        raise error(f"{path} cannot be read as a .keras model (truncated, damaged or another "
                    f"format: {str(err).splitlines()[0][:200]}).{advice}") from None


class RecurrentCausalLM(keras_hub.models.CausalLM):
    """Base of the package's tasks as keras-hub `CausalLM`s (see the module docstring).

    Subclasses provide `call(token_ids, token_mask=, state=, memory=, training=)` returning a
    dict with `state` and `memory`, `log_distribution(outputs)`, `zero_state(batch_size)` and
    `empty_memory(batch_size)`.
    """

    # Plain attributes, not keras-hub's properties: Keras and TensorFlow track them under these
    # names, so checkpoints and `.keras` files keep the paths of earlier versions.
    backbone = None
    preprocessor = None

    def compile(self, optimizer="auto", loss="auto", *, weighted_metrics="auto",
                sampler="greedy", pointer_weight=TrainConfig.pointer_loss_weight, **kwargs):
        """Configures `fit`, `evaluate` and `generate`, with the language model's defaults.

        Args:
            optimizer: "auto" (SGD at learning rate 1, the global gradient norm clipped at 5:
                the package's regime, on a loss averaged over the targets where psmm-train
                sums it over each window's T targets, so steps are 1/T of psmm-train's), an
                optimizer name or instance.
            loss: "auto": `PointerSentinelLoss(pointer_weight)` averaged over the targets (the
                mixture's negative log-likelihood, plus eq. 9's pointer term with
                `pointer_weight` > 0; the softmax cross-entropy without a pointer). Any Keras
                loss is given the targets and the mixture's log-probabilities
                `(batch_size, T, V)` as logits (e.g. `SparseCategoricalCrossentropy(
                from_logits=True)` is the mixture NLL).
            weighted_metrics: "auto": perplexity and accuracy of the mixture; metrics are given
                the mixture's log-probabilities, weighted by the padding mask.
            sampler: a keras-hub sampler or its name ("greedy", "top_k", "top_p", "random",
                "beam") for `generate`.
            pointer_weight: float >= 0. Weight of eq. 9's pointer term in the "auto" loss
                (default: psmm-train's, `TrainConfig.pointer_loss_weight` = 0; the paper: 1).
            **kwargs: as `keras.Model.compile`.
        """
        if optimizer == "auto":
            optimizer = keras.optimizers.SGD(learning_rate=1.0, global_clipnorm=5.0)
        if loss == "auto":
            loss = PointerSentinelLoss(pointer_weight=pointer_weight,
                                       reduction="mean_with_sample_weight")
        if weighted_metrics == "auto":
            weighted_metrics = [keras_hub.metrics.Perplexity(from_logits=True),
                                keras.metrics.SparseCategoricalAccuracy(name="accuracy")]
        kwargs.setdefault("jit_compile", False)
        super().compile(optimizer=optimizer, loss=loss, weighted_metrics=weighted_metrics,
                        sampler=sampler, **kwargs)

    def train_step(self, *args, **kwargs):
        # Traced inside `fit`'s training function, which is never exported: on TensorFlow the
        # native CPU kernels may be used there (psmm_tf.native, `configure`), not under XLA.
        with native.enabled(jit_compile=bool(self.jit_compile)):
            return super().train_step(*args, **kwargs)

    def get_compile_config(self):
        config = super().get_compile_config()
        if config is not None and getattr(self, "sampler", None) is not None:
            config = dict(config, sampler=keras_hub.samplers.serialize(self.sampler))
        return config

    def compile_from_config(self, config):
        config = dict(config)
        sampler = keras_hub.samplers.deserialize(config.pop("sampler")) if "sampler" in config \
            else "greedy"
        self.compile(**keras.saving.deserialize_keras_object(config), sampler=sampler)
        if self.built:
            self.optimizer.build(self.trainable_variables)

    def _compile_if_needed(self):
        if not self.compiled:
            self.compile()

    def make_generate_function(self):
        self._compile_if_needed()
        return super().make_generate_function()

    # --- fit / evaluate ---------------------------------------------------------------------

    def fit(self, x=None, y=None, *args, **kwargs):
        self._compile_if_needed()
        _check_id_arrays(self, x, y)
        return super().fit(x, y, *args, **kwargs)

    def evaluate(self, x=None, y=None, *args, **kwargs):
        self._compile_if_needed()
        _check_id_arrays(self, x, y)
        return super().evaluate(x, y, *args, **kwargs)

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        targets, weights = fit_targets(x, y, sample_weight)
        if not isinstance(self.loss, PointerSentinelLoss):
            return super().compute_loss(x, targets, self.log_distribution(y_pred), weights,
                                        training)
        losses = [self.loss(targets, y_pred, weights)]
        losses += [self._aggregate_additional_loss(loss) for loss in self.losses]
        return losses[0] if len(losses) == 1 else ops.sum(losses)

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        if "vocab_logits" not in y_pred:  # a sampled softmax in training: no distribution
            return self.get_metrics_result()
        targets, weights = fit_targets(x, y, sample_weight)
        return super().compute_metrics(x, targets, self.log_distribution(y_pred), weights)

    def predict_step(self, *args):
        # TensorFlow and torch: `(data)` -> outputs; JAX: `(state, data)` -> (outputs, state).
        result = super().predict_step(*args)
        if keras.config.backend() == "jax":
            outputs, variables = result
            return self.log_distribution(outputs), variables
        return self.log_distribution(result)

    # --- generate ---------------------------------------------------------------------------

    def generate_step(self, inputs, stop_token_ids=None):
        """Fills each row's positions after its prompt, one token per step.

        Args:
            inputs: dict with `token_ids` and `padding_mask` `(batch_size, S)`: the prompts
                (left-aligned; True on their tokens, the first being `<eos>`), S the length
                to generate up to.
            stop_token_ids: optional tuple of ids ending a row.

        Returns:
            `{"token_ids", "padding_mask"}` `(batch_size, S)`; the mask is True up to and
            including each row's first stop token.
        """
        token_ids = ops.cast(inputs["token_ids"], "int32")
        prompt_mask = ops.cast(inputs["padding_mask"], "bool")
        batch_size, length = ops.shape(token_ids)[0], ops.shape(token_ids)[1]
        # Generation starts at the shortest prompt's end (keras-hub's convention: longer
        # prompts are kept by the sampler's mask). Position `index` is predicted from the
        # state after `index - 2` and the token at `index - 1`.
        index = ops.maximum(ops.min(ops.sum(ops.cast(prompt_mask, "int32"), axis=1)), 1)
        positions = ops.arange(length, dtype="int32")[None, :]
        read = ops.broadcast_to(positions < index - 1, ops.shape(token_ids))
        prefix = self(token_ids, token_mask=read, state=self.zero_state(batch_size),
                      memory=self.empty_memory(batch_size), training=False)

        def next_token(prompt, cache, index):
            state, memory = cache
            # The sampler may widen the batch (beam search: rows x beams).
            token = ops.slice(prompt, [0, index - 1], [ops.shape(prompt)[0], 1])
            outputs = self(token, state=state, memory=memory, training=False)
            return (self.log_distribution(outputs)[:, 0], outputs["hidden"][:, 0],
                    (outputs["state"], outputs["memory"]))

        token_ids = self.sampler(next=next_token, prompt=token_ids,
                                 cache=(prefix["state"], prefix["memory"]), index=index,
                                 mask=prompt_mask, stop_token_ids=stop_token_ids, model=self)
        return {"token_ids": token_ids,
                "padding_mask": _up_to_first_stop(token_ids, prompt_mask, stop_token_ids)}

    def reset_compiled_functions(self):
        """Drops the model's cached compiled functions (`score`'s, `generate`'s), so the next
        call traces them again: a setter that changes what a trace baked in (a Python
        attribute, not a variable) calls it."""
        self.__dict__["_scoring_functions"] = {}
        self.generate_function = None

    # --- presets ----------------------------------------------------------------------------

    @classmethod
    def from_preset(cls, preset, **kwargs):
        """Loads a model from a preset folder (`save_to_preset`) or a psmm-train run folder.

        Args:
            preset: a folder holding `model.keras` (a run folder of psmm-train, or a folder
                written by `save_to_preset`) or a `.keras` file; other handles go to
                keras-hub's loader.
            **kwargs: `compile` (bool) and keras-hub's options for other handles.

        Raises:
            ValueError: the folder holds no `model.keras`, or a model of another class.
        """
        path = os.fspath(preset)
        model_file = path if path.endswith(".keras") else os.path.join(path, MODEL_FILE)
        if os.path.isdir(path) or path.endswith(".keras"):
            if not os.path.isfile(model_file):
                raise ValueError(f"preset {path!r} holds no {MODEL_FILE}: expected a folder "
                                 "written by save_to_preset, a psmm-train run folder or a "
                                 ".keras file.")
            model = read_model_file(model_file, advice=f" (preset {path!r})")
            if not isinstance(model, cls):
                raise ValueError(f"preset {path!r} holds a {type(model).__name__}, not a "
                                 f"{cls.__name__}.")
            return model
        return super().from_preset(preset, **kwargs)

    def save_to_preset(self, preset_dir):
        """Writes the model (weights, config, vocabulary) to a preset folder that
        `from_preset` loads: `model.keras` and `metadata.json`. An existing model file there
        is refused, not replaced."""
        import importlib.metadata
        import json

        os.makedirs(preset_dir, exist_ok=True)
        model_file = os.path.join(preset_dir, MODEL_FILE)
        if os.path.exists(model_file):
            raise FileExistsError(f"{model_file} exists: save_to_preset never replaces a "
                                  "model; give an empty folder.")
        self.save(model_file)
        metadata = {"class_name": type(self).__name__,
                    "psmm_tf_version": importlib.metadata.version("psmm_tf"),
                    "keras_version": keras.__version__,
                    "parameter_count": int(self.count_params())}
        with open(os.path.join(preset_dir, PRESET_METADATA_FILE), "w") as f:
            json.dump(metadata, f, indent=2)


def _check_id_arrays(model, x, y):
    """Range- and shape-checks ids given as arrays (`validate_inputs`) before they reach a
    compiled step, where a bad id cannot raise; strings and datasets are left to the
    preprocessor and the pipeline that made them."""
    from psmm_tf.models.inputs import validate_inputs

    mask = None
    if isinstance(x, dict) and "token_ids" in x:
        x, mask = x["token_ids"], x.get("padding_mask")
    if not _is_numeric_array(x) or not (y is None or _is_numeric_array(y)):
        return
    validate_inputs(model, x, target_ids=y, padding_mask=mask)


def _is_numeric_array(value):
    dtype = getattr(value, "dtype", None)
    return dtype is not None and getattr(dtype, "kind", "") in "iub" and hasattr(value, "shape")


def fit_targets(x, y, sample_weight):
    """The targets `(batch_size, T)` and their weights of a `fit`/`evaluate` batch.

    `y` holds the targets; the weights are `sample_weight`, else the input dict's
    `padding_mask`, else 1.
    """
    if y is None:
        raise ValueError("fit/evaluate need targets: give y (the next token of each input "
                         "token) or strings through the preprocessor.")
    if sample_weight is None and isinstance(x, dict) and "padding_mask" in x:
        sample_weight = x["padding_mask"]
    if sample_weight is None:
        sample_weight = ops.ones(ops.shape(y), "float32")
    return ops.cast(y, "int32"), ops.cast(sample_weight, "float32")


def _up_to_first_stop(token_ids, prompt_mask, stop_token_ids):
    """True up to and including each row's first generated stop token (all True without)."""
    if stop_token_ids is None:
        return ops.ones_like(token_ids, dtype="bool")
    generated = ops.logical_not(prompt_mask)
    is_stop = ops.zeros_like(prompt_mask)
    for stop in stop_token_ids:
        is_stop = ops.logical_or(is_stop, ops.equal(token_ids, stop))
    stops = ops.cast(ops.logical_and(is_stop, generated), "int32")
    return ops.equal(ops.cumsum(stops, axis=1) - stops, 0)
