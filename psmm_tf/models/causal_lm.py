"""keras-hub's `CausalLM` for recurrent tasks: compile/fit, predict, generate and presets (their
helpers beside it: fit_inputs.py, generation.py and presets.py in psmm_tf/models/).

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
  memory of the last `L - 1` hidden states, so the pointer copies words of the prompt, those
  outside the vocabulary included (ids `V + j`, read as `<unk>`; `_generate_texts`).

What `fit` does with state and memory: every row of a batch is a text of its own, read from the
zero state with an empty memory, as keras-hub's causal LMs read theirs. psmm-train's trainer
instead carries both across the consecutive windows of each stream (truncated BPTT, the pointer
seeing across window boundaries); docs/design_notes.md compares the two.
"""

import os

import keras
import keras_hub
import numpy as np
from keras import ops
from keras_hub.src.utils import preset_utils

from psmm_tf import native
from psmm_tf.configs import TrainConfig
from psmm_tf.losses.pointer_sentinel_loss import PointerSentinelLoss
from psmm_tf.models import fit_inputs, generation, presets
from psmm_tf.models.accuracy import SparseCategoricalAccuracy
from psmm_tf.models.backbone import LSTMBackbone, check_subclassed, preset_dtype
from psmm_tf.models.tokenizer import vocabulary_in_assets

# Keras' names of the sparse cross-entropy, as the loss on the mixture's log-probabilities.
_LOSS_NAMES = {name: lambda: keras.losses.SparseCategoricalCrossentropy(from_logits=True)
               for name in ("sparse_categorical_crossentropy", "SparseCategoricalCrossentropy")}


class _BackboneOfTheBaseOnly:
    """keras-hub's `Task.backbone_cls`: `LSTMBackbone` on `RecurrentCausalLM`, None on the tasks.

    `keras_hub.models.CausalLM.from_preset` picks the one registered `CausalLM` whose
    `backbone_cls` is the preset's backbone class, then builds `task.json`'s class if it
    subclasses that one: `RecurrentCausalLM`, the base of every task, is the one to pick.
    """

    def __get__(self, instance, owner):
        return LSTMBackbone if owner is RecurrentCausalLM else None


@keras.saving.register_keras_serializable(package="psmm_tf")
class RecurrentCausalLM(keras_hub.models.CausalLM):
    """Base of the package's tasks as keras-hub `CausalLM`s (see the module docstring).

    Subclasses provide `call(token_ids, token_mask=, state=, memory=, key_ids=, training=)`
    returning a dict with `state` and `memory`, `log_distribution(outputs, extra_ids=0)`,
    `zero_state(batch_size)` and `empty_memory(batch_size)`.
    """

    backbone_cls = _BackboneOfTheBaseOnly()
    # Plain attributes, not keras-hub's properties: Keras and TensorFlow track them under these
    # names, so checkpoints and `.keras` files keep these paths.
    backbone = None
    preprocessor = None

    def __init__(self, *args, **kwargs):
        if type(self) is RecurrentCausalLM:  # keras-hub builds the base on a backbone's preset
            raise ValueError(
                "RecurrentCausalLM is the base of psmm_tf's tasks and has no head: build "
                "PointerSentinelLM, LSTMLanguageModel or PointerSoftmaxLM. A preset without "
                "task.json (a backbone's) loads with the task's class, e.g. "
                "PointerSentinelLM.from_preset(path, window_size=100).")
        check_subclassed(type(self))
        super().__init__(*args, **kwargs)

    def __setattr__(self, name, value):
        tracker = self.__dict__.get("_tracker")
        if name != "preprocessor" or tracker is None:
            return super().__setattr__(name, value)
        # A new preprocessor at any time, as keras-hub's tasks take one (the old one no
        # longer among the task's layers); a built task stays locked against other new state.
        if getattr(value, "weights", None):
            raise ValueError(f"A task's preprocessor holds no weights; {type(value).__name__} "
                             f"has {len(value.weights)}.")
        old = self.__dict__.get("preprocessor")
        if old is not None and old is not value:
            tracker.untrack(old)
        locked = tracker.locked
        tracker.unlock()
        try:
            return super().__setattr__(name, value)
        finally:
            if locked:
                self._lock_state()

    def __call__(self, *args, **kwargs):
        check_subclassed(type(self))  # else Keras' functional methods fail on it, unnamed
        return super().__call__(*args, **kwargs)  # the backbone's call checks the backbone

    @property
    def sampler(self):
        """The keras-hub sampler `generate` uses (set by `compile`; None before)."""
        return self.__dict__.get("_generate_sampler")

    @sampler.setter
    def sampler(self, sampler):
        # Set after compile too: `generate` traces again with it (TensorFlow had kept the
        # sampler of its first trace, JAX took the new one).
        if sampler is not None:
            generation.check_sampler(sampler)
            sampler = keras_hub.samplers.get(sampler)
        self.__dict__["_generate_sampler"] = sampler
        self.generate_function = None

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
                from_logits=True)` is the mixture NLL), or its probabilities where the loss
                has `from_logits=False`; the name "sparse_categorical_crossentropy" is the
                mixture NLL. Losses averaged over the batch ("sum_over_batch_size") average
                over the weighted targets (padding excluded), as the "auto" loss does.
            weighted_metrics: "auto": perplexity and accuracy of the mixture; metrics are given
                the mixture's log-probabilities, weighted by the padding mask.
            sampler: a keras-hub sampler or its name ("greedy", "top_k", "top_p", "random",
                "beam", "contrastive") for `generate`.
            pointer_weight: float >= 0. Weight of eq. 9's pointer term in the "auto" loss
                (default: psmm-train's, `TrainConfig.pointer_loss_weight` = 0; the paper: 1).
            **kwargs: as `keras.Model.compile`. `jit_compile` defaults to False on TensorFlow
                (`fit`'s step may run the native CPU kernels, which XLA cannot) and to Keras's
                "auto" on the other backends (JAX: `fit` compiled with `jax.jit`).

        Raises:
            ValueError: `sampler` is not one of `generation.SAMPLER_NAMES` or a keras-hub
                sampler.
        """
        if optimizer == "auto":
            optimizer = keras.optimizers.SGD(learning_rate=1.0, global_clipnorm=5.0)
        if isinstance(loss, str) and loss in _LOSS_NAMES:
            loss = _LOSS_NAMES[loss]()
        if loss == "auto":
            loss = PointerSentinelLoss(pointer_weight=pointer_weight,
                                       reduction="mean_with_sample_weight")
        if weighted_metrics == "auto":
            weighted_metrics = [keras_hub.metrics.Perplexity(from_logits=True),
                                SparseCategoricalAccuracy(name="accuracy")]
        generation.check_sampler(sampler)
        if keras.config.backend() == "tensorflow":
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
        # The backend's default: a file saved on JAX (compiled) is loaded on TensorFlow too.
        config.pop("jit_compile", None)
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
        drop_stale_compiled_functions(self)
        function = super().make_generate_function()
        note_traced_weights(self)
        return function

    # --- fit / evaluate ---------------------------------------------------------------------

    def fit(self, x=None, y=None, batch_size=None, epochs=1, verbose="auto", callbacks=None,
            validation_split=0.0, validation_data=None, shuffle=True, class_weight=None,
            sample_weight=None, **kwargs):
        """As `keras.Model.fit`, on strings (through the preprocessor), ids or datasets.

        Arrays are checked before any step (a compiled step cannot raise on a value): ids
        (int, or float holding whole numbers) `(batch_size, T)` in `[0, V)`, targets `y` of the
        same shape, `sample_weight` finite and >= 0, `(batch_size,)` per text or
        `(batch_size, T)` per target (with strings: per text, multiplying the padding mask).

        Raises:
            ValueError: an input named in the message is empty, of the wrong rank or dtype,
                holds an id outside the vocabulary or a weight that is NaN, infinite or < 0.
        """
        self._compile_if_needed()
        if validation_split and sample_weight is not None and fit_inputs.holds_texts(x):
            raise ValueError("fit on texts with a sample_weight takes validation_data, "
                             "not validation_split.")
        x, y, sample_weight, batch_size = self._checked_inputs(x, y, sample_weight, batch_size)
        return super().fit(x, y, batch_size=batch_size, epochs=epochs, verbose=verbose,
                           callbacks=callbacks, validation_split=validation_split,
                           validation_data=validation_data, shuffle=shuffle,
                           class_weight=class_weight, sample_weight=sample_weight, **kwargs)

    def evaluate(self, x=None, y=None, batch_size=None, verbose="auto", sample_weight=None,
                 **kwargs):
        """As `keras.Model.evaluate`, with `fit`'s checks of arrays."""
        self._compile_if_needed()
        x, y, sample_weight, batch_size = self._checked_inputs(x, y, sample_weight, batch_size)
        return super().evaluate(x, y, batch_size=batch_size, verbose=verbose,
                                sample_weight=sample_weight, **kwargs)

    def _checked_inputs(self, x, y, sample_weight, batch_size):
        """`fit`'s and `evaluate`'s inputs after their checks: `(x, y, sample_weight,
        batch_size)`, texts with weights as one preprocessed dataset."""
        x, y = fit_inputs.as_array_if_list_of_ids(x), fit_inputs.as_array_if_list_of_ids(y)
        fit_inputs.check_id_arrays(self, x, y, sample_weight)
        if sample_weight is not None and fit_inputs.holds_texts(x):
            x, sample_weight, batch_size = self._weighted_texts(x, sample_weight, batch_size)
        return x, y, sample_weight, batch_size

    def _weighted_texts(self, texts, sample_weight, batch_size):
        """Texts and one weight per text as a preprocessed dataset (keras-hub's own path
        drops `sample_weight` when `y` is None): `(dataset, None, None)` for `fit`."""
        import tensorflow as tf

        if self.preprocessor is None:
            raise ValueError("fit on texts needs a preprocessor.")
        texts = [texts] if isinstance(texts, str) else texts
        weights = np.asarray(sample_weight, np.float32)
        if len(weights) != len(texts):
            raise ValueError(f"`sample_weight` holds {len(weights)} weights for {len(texts)} "
                             "texts: expected one weight per text.")
        dataset = tf.data.Dataset.from_tensor_slices((tf.constant(texts), weights))
        dataset = dataset.batch(batch_size or 32).map(
            lambda t, w: self.preprocessor(t, sample_weight=w))
        return dataset, None, None

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        targets, weights = fit_inputs.fit_targets(x, y, sample_weight)
        if not isinstance(self.loss, PointerSentinelLoss):
            predictions = self.log_distribution(y_pred)
            if getattr(self.loss, "from_logits", True) is False:
                predictions = ops.exp(predictions)  # a loss of probabilities gets them
            if getattr(self.loss, "reduction", None) == "sum_over_batch_size":
                # Keras divides by every position, padding included: weights rescaled to a
                # mean of 1, the average is over the weighted targets, as the default loss.
                weights = weights * ops.divide_no_nan(ops.cast(ops.size(weights), "float32"),
                                                      ops.sum(weights))
            return super().compute_loss(x, targets, predictions, weights, training)
        losses = [self.loss(targets, y_pred, weights)]
        losses += [self._aggregate_additional_loss(loss) for loss in self.losses]
        return losses[0] if len(losses) == 1 else ops.sum(losses)

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        if "vocab_logits" not in y_pred:  # a sampled softmax in training: no distribution
            return self.get_metrics_result()
        targets, weights = fit_inputs.fit_targets(x, y, sample_weight)
        return super().compute_metrics(x, targets, self.log_distribution(y_pred), weights)

    def predict_step(self, *args):
        # TensorFlow and torch: `(data)` -> outputs; JAX: `(state, data)` -> (outputs, state).
        result = super().predict_step(*args)
        if keras.config.backend() == "jax":
            outputs, variables = result
            return self.log_distribution(outputs), variables
        return self.log_distribution(result)

    # --- generate ---------------------------------------------------------------------------

    def generate(self, inputs, max_length=None, stop_token_ids="auto", strip_prompt=False):
        """keras-hub's `generate`, its arguments checked first.

        Args:
            inputs: prompts (a str, a list of str, or a NumPy array or eager string tensor
                of them of rank 0 or 1: their words outside the vocabulary are kept and may
                be copied; ids as a dict of `token_ids` and `padding_mask`
                `(batch_size, S)` with `preprocessor=None`, ids `V + j` read as `<unk>` and
                copied as themselves) or a dataset.
            max_length: optional int in `[2, generation.MAX_GENERATE_LENGTH]`: tokens of
                prompt (its leading `<eos>` included) and generated words together; it must
                exceed the longest prompt's length (default: the preprocessor's
                `sequence_length`).
            stop_token_ids: "auto" (`<eos>`), None, or a list or tuple of int ids in `[0, V)`.
            strip_prompt: bool, as keras-hub's.

        Raises:
            ValueError: `max_length` or `stop_token_ids` is not of the form above, a prompt
                leaves no position to generate, or preprocessed ids (a dict) are given to a
                model with a preprocessor.
        """
        generation.check_max_length(max_length)
        stop_token_ids = generation.checked_stop_token_ids(stop_token_ids, self.vocab_size)
        if self.preprocessor is not None and isinstance(inputs, dict):
            raise ValueError(
                f"generate: the prompts are preprocessed ids (a dict of {sorted(inputs)}), but "
                f"this model has a preprocessor, which reads text: give the prompts as text, or "
                f"set model.preprocessor = None to generate from ids.")
        if self.preprocessor is not None:
            inputs = generation.held_texts(inputs)
            length = self.preprocessor.sequence_length if max_length is None else max_length
            longest = generation.longest_prompt(self.preprocessor, inputs)
            if longest is not None and longest >= length:
                given = (f"max_length={max_length}" if max_length is not None else
                         f"the preprocessor's sequence_length ({length}, max_length=None)")
                raise ValueError(
                    f"{given} leaves no position to generate: the longest prompt holds "
                    f"{longest} tokens (its words and the leading <eos>); give a max_length > "
                    f"{longest} (prompt and generated words together).")
        if self.preprocessor is not None and generation.is_text_list(inputs):
            return self._generate_texts(inputs, max_length, stop_token_ids, strip_prompt)
        if self.preprocessor is not None and strip_prompt:
            return self._generate_stripped(inputs, max_length, stop_token_ids)
        return super().generate(inputs, max_length=max_length, stop_token_ids=stop_token_ids,
                                strip_prompt=strip_prompt)

    def _generated_ids(self, prompts, stop_token_ids, strip_prompt):
        """`generate_function` on preprocessed prompts, the prompt stripped where asked."""
        if isinstance(stop_token_ids, str):  # "auto"
            stop_token_ids = [self.preprocessor.tokenizer.end_token_id]
        outputs = self.make_generate_function()(
            prompts, stop_token_ids=None if stop_token_ids is None else tuple(stop_token_ids))
        return generation.generated_part(outputs, prompts) if strip_prompt else outputs

    def _generate_texts(self, inputs, max_length, stop_token_ids, strip_prompt):
        """keras-hub's three passes (preprocess, `generate_function`, postprocess) on a str or
        a list of str, each prompt's words outside the vocabulary kept (ids >= V, which the
        pointer copies) and spelt back in the output."""
        texts = [inputs] if isinstance(inputs, str) else list(inputs)
        prompts, unknown_words = self.preprocessor.open_vocabulary_prompts(
            texts, sequence_length=max_length)
        outputs = self._generated_ids(prompts, stop_token_ids, strip_prompt)
        generated = self.preprocessor.generate_postprocess(
            outputs, unknown_words=unknown_words, prompt_included=not strip_prompt)
        return generated[0] if isinstance(inputs, str) else generated

    def _generate_stripped(self, inputs, max_length, stop_token_ids):
        """keras-hub's three passes with `strip_prompt` on a string tensor or a dataset:
        the generated words of each prompt (keras-hub's postprocess would drop the first of
        them as the prompt's leading `<eos>`)."""
        batches, input_is_scalar = self._normalize_generate_inputs(inputs)
        outputs = []
        for batch in batches:
            prompts = self.preprocessor.generate_preprocess(batch, sequence_length=max_length)
            outputs.append(self.preprocessor.generate_postprocess(
                self._generated_ids(prompts, stop_token_ids, strip_prompt=True),
                prompt_included=False))
        return self._normalize_generate_outputs(outputs, input_is_scalar)

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
        # The open vocabulary: ids >= V (a prompt's words outside the vocabulary) are read as
        # `<unk>` and kept as the keys' ids, so the pointer copies them; the distribution
        # spans V + S ids (the softmax gives the S extra ones nothing).
        extra_ids = (token_ids.shape[1] or 0) if getattr(self, "has_pointer", False) else 0
        unknown = self._unknown_id()

        def step(ids, state, memory, mask=None):
            return self(ops.where(ids >= self.vocab_size, unknown, ids), token_mask=mask,
                        state=state, memory=memory, key_ids=ids, training=False)

        prefix = step(token_ids, self.zero_state(batch_size), self.empty_memory(batch_size),
                      mask=read)

        def next_token(prompt, cache, index):
            state, memory = cache
            # The sampler may widen the batch (beam search: rows x beams).
            token = ops.slice(prompt, [0, index - 1], [ops.shape(prompt)[0], 1])
            outputs = step(token, state, memory)
            return (self.log_distribution(outputs, extra_ids)[:, 0], outputs["hidden"][:, 0],
                    (outputs["state"], outputs["memory"]))

        hidden_states = {}
        if isinstance(self.sampler, keras_hub.samplers.ContrastiveSampler):
            # Its degeneration penalty compares each candidate's hidden state with those of the
            # text so far, `(batch_size, S, D)` (as keras-hub's GPT2 passes them): every
            # position before `index`, the last prompt token's included.
            hidden_states["hidden_states"] = step(
                token_ids, self.zero_state(batch_size), self.empty_memory(batch_size),
                mask=ops.broadcast_to(positions < index, ops.shape(token_ids)))["hidden"]
        token_ids = self.sampler(next=next_token, prompt=token_ids,
                                 cache=(prefix["state"], prefix["memory"]), index=index,
                                 mask=prompt_mask, stop_token_ids=stop_token_ids, model=self,
                                 **hidden_states)
        return {"token_ids": token_ids,
                "padding_mask": generation.up_to_first_stop(token_ids, prompt_mask,
                                                            stop_token_ids)}

    def _unknown_id(self):
        """The id of `<unk>`: the preprocessor's, else 0 (where built vocabularies put it)."""
        tokenizer = getattr(self.preprocessor, "tokenizer", None)
        if tokenizer is not None and tokenizer.vocabulary is not None:
            return tokenizer.unk_token_id
        return 0

    def reset_compiled_functions(self):
        """Drops the model's cached compiled functions (`score`'s, `generate`'s), so the next
        call traces them again: a setter that changes what a trace baked in (a Python
        attribute, not a variable) calls it."""
        self.__dict__["_scoring_functions"] = {}
        self.generate_function = None

    # --- export ---------------------------------------------------------------------------

    def export(self, filepath, format="tf_saved_model", verbose=None, input_signature=None,
               **kwargs):
        """Keras' `export`; a SavedModel's `serve` endpoint returns what `predict` does.

        With `format="tf_saved_model"`, `serve` reads its input from the zero state with an
        empty memory and returns the mixture's log-probabilities `(batch_size, T, V)`, pointer
        included (`predict`'s), not the call's dict; without `input_signature` it takes
        keras-hub's inputs, `{"token_ids": int32, "padding_mask": bool}` `(batch_size, T)` (the
        preprocessor's), with one it takes that one input (such a dict, or the token ids). On
        JAX the SavedModel is written through jax2tf (TensorFlow needed). Other formats are
        Keras'. psmm-export writes the serving SavedModel (texts, carried state, open
        vocabulary).
        """
        if format != "tf_saved_model":
            return super().export(filepath, format=format, verbose=verbose,
                                  input_signature=input_signature, **kwargs)
        archive = keras.export.ExportArchive()
        archive.track(self)
        if input_signature is None:
            input_signature = [
                {"token_ids": keras.InputSpec(shape=(None, None), dtype="int32"),
                 "padding_mask": keras.InputSpec(shape=(None, None), dtype="bool")}]
        elif not isinstance(input_signature, (list, tuple)):
            input_signature = [input_signature]
        if len(input_signature) != 1:
            raise ValueError(f"export(input_signature=...) takes one input (keras-hub's dict of "
                             f"token_ids and padding_mask, or the token ids), got "
                             f"{len(input_signature)}.")
        if keras.config.backend() == "jax":  # one symbolic batch and T for every input (jax2tf)
            kwargs.setdefault("is_static", True)
            kwargs["jax2tf_kwargs"] = dict(kwargs.get("jax2tf_kwargs") or {})
            kwargs["jax2tf_kwargs"].setdefault(
                "polymorphic_shapes", [keras.tree.map_structure(
                    _polymorphic_shape, input_signature[0])])
        archive.add_endpoint(
            "serve", lambda inputs: self.log_distribution(self(inputs, training=False)),
            input_signature=list(input_signature), **kwargs)
        archive.write_out(filepath, verbose=True if verbose is None else verbose)

    # --- presets ---------------------------------------------------------------------------

    @classmethod
    def from_preset(cls, preset, load_weights=True, **kwargs):
        """Loads a model from a preset folder, a psmm-train run folder or a `.keras` file.

        A folder written by `save_to_preset` is keras-hub's preset layout (`task.json`,
        `config.json`, weights, tokenizer assets), which `keras_hub.models.CausalLM.from_preset`
        and `keras_hub.models.Backbone.from_preset` open too.
        A backbone's preset (keras-hub's layout without `task.json`: `backbone.save_to_preset`,
        with or without `preprocessor.save_to_preset`) gives a task of this class with a new
        head on its backbone, `kwargs` its arguments (`window_size=`, ...).

        Args:
            preset: a folder holding keras-hub's `config.json` (`save_to_preset`) or a
                `model.keras` (a psmm-train run folder, or an earlier `save_to_preset`), a
                `.keras` file; a handle with a scheme (`kaggle://`, `hf://`, ...) goes to
                keras-hub's loader.
            load_weights: bool. False: the preset's architecture and vocabulary, new weights
                (and no gate calibration: it belongs to the preset's weights).
            **kwargs: `dtype` (a Keras dtype policy of the loaded model; None: keras-hub's
                rule, the global policy for a float preset) and keras-hub's other options.

        Raises:
            ValueError: the path does not exist, is a file other than a `.keras` file, a
                symlink loop, or a folder holding no preset, or a model of another class; the
                message names the path and what a preset holds.
        """
        path = os.fspath(preset)
        if "://" in path or presets.holds_keras_hub_config(path):
            if not preset_utils.check_file_exists(path, preset_utils.TASK_CONFIG_FILE):
                # A backbone's preset (keras-hub's layout without task.json): a new head on it.
                return presets.task_on_backbone_preset(cls, path, load_weights, **kwargs)
            # keras-hub's loader, asked for the common base: it builds task.json's class.
            kwargs["dtype"] = preset_dtype(path, kwargs.get("dtype"), load_weights)
            model = super(RecurrentCausalLM, RecurrentCausalLM).from_preset(
                preset, load_weights=load_weights, **kwargs)
        else:
            model = presets.model_file_preset(path, cls, load_weights, **kwargs)
        presets.check_preset_class(model, cls, path)
        if not load_weights and hasattr(model, "set_gate_calibration"):
            # The gate's calibration was fitted to the preset's weights, not to new ones.
            model.set_gate_calibration(None)
        return model

    def save_to_preset(self, preset_dir, max_shard_size=10):
        """Writes the model to a preset folder in keras-hub's layout, which `from_preset` and
        keras-hub's loaders (`keras_hub.models.CausalLM.from_preset`) load.

        The folder holds `task.json` (the task's config), `task.weights.h5` (the head's
        weights; PSMM's gate calibration with them), `config.json` and `model.weights.h5` (the
        backbone), `preprocessor.json`, `tokenizer.json` and `assets/tokenizer/vocabulary.txt`
        (the tokenizer's asset, the one copy of the tokens), and
        `metadata.json` (keras-hub's, plus `psmm_tf_version` and `class_name`).

        Raises:
            ValueError: `preset_dir` names a `.keras` file (a preset is a folder; one file is
                `model.save(path)`).
            FileExistsError: `preset_dir` is a file, or holds a file a preset is made of
                (never replaced); nothing is written.
        """
        path = os.fspath(preset_dir)
        presets.check_new_preset_folder(path)
        with vocabulary_in_assets():  # the tokens once, in the tokenizer's asset
            super().save_to_preset(path, max_shard_size=max_shard_size)
        presets.add_psmm_tf_metadata(path, type(self).__name__)


def drop_stale_compiled_functions(model):
    """Drops `model`'s cached compiled functions (`score`'s, `generate`'s) where its weights
    changed in number since they were traced: `backbone.enable_lora` adds factors that a
    function traced before would not read (TensorFlow keeps the trace; JAX traces again)."""
    traced = model.__dict__.get("_traced_weight_count")
    if traced is not None and traced != len(model.weights):
        model.reset_compiled_functions()


def note_traced_weights(model):
    """Records how many weights `model`'s compiled functions were traced with."""
    model.__dict__["_traced_weight_count"] = len(model.weights)


def _polymorphic_shape(spec):
    """jax2tf's shape of an export input: its batch and T dimensions symbolic (shared by every
    input of the endpoint) where the `InputSpec` leaves them None."""
    names = ("batch", "t")
    dims = [str(size) if size is not None else names[i] if i < 2 else f"d{i}"
            for i, size in enumerate(spec.shape)]
    return "(" + ", ".join(dims) + ")"


