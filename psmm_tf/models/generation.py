"""`generate`'s arguments checked, its text prompts read, its outputs cut: the helpers of
`RecurrentCausalLM.generate` and `generate_step` (psmm_tf/models/causal_lm.py)."""

import keras_hub
import numpy as np
from keras import ops

# The samplers `compile(sampler=...)` takes by name (keras-hub's, as `generate` drives them).
SAMPLER_NAMES = ("greedy", "top_k", "top_p", "random", "beam", "contrastive")

# The longest `generate(max_length=...)`: reading the prompt forms `(batch_size, max_length, V)`
# log-probabilities, so an unbounded length is unbounded memory.
MAX_GENERATE_LENGTH = 4096


def check_sampler(sampler):
    """Refuses a sampler `generate` could not call, at `compile`."""
    if isinstance(sampler, str):
        if sampler not in SAMPLER_NAMES:
            raise ValueError(f"compile(sampler={sampler!r}): expected one of {SAMPLER_NAMES} "
                             "or a keras_hub.samplers.Sampler.")
    elif not isinstance(sampler, (keras_hub.samplers.Sampler, dict)):
        raise ValueError(f"compile(sampler=...) got a {type(sampler).__name__}: expected one "
                         f"of {SAMPLER_NAMES} or a keras_hub.samplers.Sampler.")


def check_max_length(max_length):
    if max_length is None:
        return
    if isinstance(max_length, bool) or not isinstance(max_length, (int, np.integer)):
        raise ValueError(f"generate: max_length must be None or an integer, got "
                         f"{max_length!r}.")
    if not 2 <= max_length <= MAX_GENERATE_LENGTH:
        raise ValueError(f"generate: max_length must be in [2, {MAX_GENERATE_LENGTH}] (tokens "
                         f"of prompt, its leading <eos> included, and generated words), got "
                         f"{max_length}.")


def checked_stop_token_ids(stop_token_ids, vocab_size):
    """`stop_token_ids` ("auto", None, or int ids in [0, V)) as keras-hub takes them."""
    if stop_token_ids is None or (isinstance(stop_token_ids, str) and stop_token_ids == "auto"):
        return stop_token_ids
    expected = (f"expected 'auto', None or a list of int ids in [0, {vocab_size}) (a word's "
                "id: model.preprocessor.tokenizer.token_to_id(word))")
    if not isinstance(stop_token_ids, (list, tuple)):
        raise ValueError(f"generate: stop_token_ids={stop_token_ids!r}: {expected}.")
    for token in stop_token_ids:
        if isinstance(token, bool) or not isinstance(token, (int, np.integer)):
            raise ValueError(f"generate: stop_token_ids holds {token!r}: {expected}.")
        if not 0 <= token < vocab_size:
            raise ValueError(f"generate: stop_token_ids holds the id {int(token)}, outside the "
                             f"vocabulary: {expected}.")
    return [int(token) for token in stop_token_ids]


def longest_prompt(preprocessor, inputs):
    """Tokens of the longest prompt in `inputs` (str or list of str), its leading `<eos>`
    included; None for other inputs (ids, datasets), whose length the caller gives."""
    if isinstance(inputs, str):
        inputs = [inputs]
    if not (isinstance(inputs, (list, tuple)) and inputs
            and all(isinstance(text, str) for text in inputs)):
        return None
    if preprocessor.vocabulary is None:
        return None  # the preprocessor's own error follows
    tokens = preprocessor.tokenizer.tokenize(list(inputs), finish_last_line=False)
    return 1 + max(len(row) for row in tokens)


def held_texts(inputs):
    """`inputs` as a str or a list of str where it holds text as bytes (or a list of them), in a
    NumPy array or in an eager string tensor of rank 0 or 1 (bytes read as UTF-8), so every form
    of a text prompt keeps its words outside the vocabulary; other inputs as they are."""
    if isinstance(inputs, bytes) or (isinstance(inputs, np.ndarray)
                                     and inputs.dtype.kind in "USO"):
        values = np.asarray(inputs)
    elif (isinstance(inputs, (list, tuple)) and inputs
          and all(isinstance(value, bytes) for value in inputs)):
        values = np.asarray(list(inputs), dtype=object)
    elif getattr(getattr(inputs, "dtype", None), "name", None) == "string":
        try:  # an eager tf.string tensor; a symbolic one is left to keras-hub's path
            values = np.asarray(inputs.numpy())
        except (AttributeError, NotImplementedError, TypeError):
            return inputs
    else:
        return inputs
    if values.ndim > 1:
        return inputs
    texts = []
    for index, value in enumerate(values.reshape(-1).tolist()):
        if isinstance(value, bytes):
            try:
                value = value.decode("utf-8")
            except UnicodeDecodeError as err:
                raise ValueError(f"generate: prompt {index} is not UTF-8 text ({err}).") from None
        if not isinstance(value, str):
            return inputs
        texts.append(value)
    return texts[0] if values.ndim == 0 else texts


def is_text_list(inputs):
    return isinstance(inputs, str) or (isinstance(inputs, (list, tuple)) and bool(inputs)
                                       and all(isinstance(text, str) for text in inputs))


def generated_part(outputs, prompts):
    """keras-hub's `strip_prompt`: each row's generated tokens moved to its start (and its
    mask True on them only)."""
    prompt_mask = ops.convert_to_tensor(prompts["padding_mask"], "bool")
    length = ops.shape(prompt_mask)[1]
    shifts = ops.sum(ops.cast(prompt_mask, "int32"), axis=1)
    index = ops.mod(ops.arange(length, dtype="int32")[None, :] + shifts[:, None], length)

    def roll(values):
        return ops.take_along_axis(ops.convert_to_tensor(values), index, axis=1)

    return {"token_ids": roll(outputs["token_ids"]),
            "padding_mask": ops.logical_xor(roll(prompt_mask), roll(outputs["padding_mask"]))}


def up_to_first_stop(token_ids, prompt_mask, stop_token_ids):
    """True up to and including each row's first generated stop token (all True without)."""
    if stop_token_ids is None:
        return ops.ones_like(token_ids, dtype="bool")
    generated = ops.logical_not(prompt_mask)
    is_stop = ops.zeros_like(prompt_mask)
    for stop in stop_token_ids:
        is_stop = ops.logical_or(is_stop, ops.equal(token_ids, stop))
    stops = ops.cast(ops.logical_and(is_stop, generated), "int32")
    return ops.equal(ops.cumsum(stops, axis=1) - stops, 0)
