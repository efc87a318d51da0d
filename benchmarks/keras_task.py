r"""The Keras task's own paths against their references: long-text scoring and generation.

1. `score_text` of one long text (20,000 words by default) in Python (`model.score_text`: the
   corpus readers' tokenization, then `score` in pieces of `SCORE_PIECE_LENGTH` positions) and
   through the exported SavedModel's `score_text` signature (the whole text in one graph call).
   Each path runs in a child process of its own that loads the model, scores the text once to
   warm up and `--rounds` more times: reported are the median seconds, the ratio Python /
   SavedModel, and the child's peak resident memory (target: under 1.5 GB for the Python path,
   and a small multiple of the SavedModel's time). The two paths' log-likelihoods must agree.
2. `generate` (keras-hub's greedy sampler in one compiled loop, carrying state and memory)
   against a hand loop: a compiled one-token step called from Python per token, as a user
   would write it. Both generate the same tokens (checked); reported are tokens per second
   and the ratio.
3. `fit` with the default `compile()` (the backend's `jit_compile` default: off on
   TensorFlow, `jax.jit` on JAX) on random ids, the preset's batch size and `num_predicted`
   targets per row, on each backend of `--backends` side by side: a process has one Keras
   backend, so each backend (and each `--tf_native` mode of TensorFlow's native CPU kernels)
   trains in a child process of its own, started with `KERAS_BACKEND` set. Each child builds
   the model and runs one warm-up `fit` call (compile); then the parent has the children take
   turns (TF, JAX, TF, JAX, ...), `--fit_rounds` rounds of one `fit` call of `--fit_steps`
   steps each, so load from elsewhere hits every backend alike. Reported are each child's
   median steps/s and, for each other child, the time ratio to the first TensorFlow child:
   the median (and range) over rounds of a round's time over that child's time in the same
   round, and the ratio of the two children's median times.

Weights are random (the preset's initialisation): speed does not depend on them.

Usage:
  python benchmarks/keras_task.py --preset=small --words=20000 --rounds=3 --parts=score,generate
  python benchmarks/keras_task.py --preset=small --parts=fit --backends=tensorflow,jax \
      --tf_native=auto,off --fit_rounds=7 --fit_steps=20

Parts 1 and 2 run on the backend of the parent process (`KERAS_BACKEND`, TensorFlow by
default).
"""

import multiprocessing
import os
import resource
import shutil
import tempfile
import time

import numpy as np
from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_string("preset", "small", "Model preset.")
flags.DEFINE_integer("vocab_size", 10000, "Vocabulary size (PTB: 10,000).")
flags.DEFINE_integer("words", 20000, "Words of the long text (one line per 20 words).")
flags.DEFINE_integer("rounds", 3, "Timed calls per scoring path (after one warm-up call).")
flags.DEFINE_integer("prompt_words", 20, "Words of the generation prompt.")
flags.DEFINE_integer("generate_tokens", 200, "Tokens generated per timed generation.")
flags.DEFINE_integer("batch_size", 4, "Prompts generated at once.")
flags.DEFINE_integer("seed", 0, "Seed of the text and weights.")
flags.DEFINE_list("parts", ["score", "generate", "fit"], "Which measurements to run: score, "
                  "generate, fit.")
flags.DEFINE_integer("fit_steps", 20, "Training steps of one timed fit call.")
flags.DEFINE_integer("fit_rounds", 5, "Timed fit calls per child, the children taking turns.")
flags.DEFINE_list("backends", ["tensorflow", "jax"], "Keras backends whose fit is measured, "
                  "each in a child process; ratios are to the first TensorFlow child.")
flags.DEFINE_list("tf_native", ["auto"], "psmm_tf.native modes of the TensorFlow children "
                  "(one child per mode): auto, on, off.")


def _build(preset, vocab_size, seed, folder):
    """A model of the preset with a vocabulary of `vocab_size` words, saved in `folder`."""
    from psmm_tf import configs
    from psmm_tf.data import Vocabulary
    from psmm_tf.models import LanguageModelPreprocessor, build_model

    words = ["<unk>", "<eos>"] + [f"w{i}" for i in range(vocab_size - 2)]
    vocabulary = Vocabulary(words)
    config = configs.get_preset(preset).replace(model={"vocab_size": vocab_size, "seed": seed})
    model = build_model(config.model, preprocessor=LanguageModelPreprocessor(vocabulary))
    vocab_file = os.path.join(folder, "vocab.txt")
    vocabulary.save(vocab_file)
    model.save(os.path.join(folder, "model.keras"))
    return model, vocab_file, words


def _long_text(words, count, rng):
    tokens = rng.choice(words[2:], size=count)
    return "\n".join(" ".join(tokens[i:i + 20]) for i in range(0, count, 20)) + "\n"


def _score_child(path, folder, text, rounds, queue):
    """Child process: score `text` `rounds + 1` times on one path; report times and peak RSS."""
    import keras
    import tensorflow as tf

    import psmm_tf  # noqa: F401  (registers the classes)

    if path == "load only":  # the baseline: imports and the loaded model, no scoring
        keras.saving.load_model(os.path.join(folder, "model.keras"))
        queue.put((0.0, 0.0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024))
        return
    if path == "python":
        model = keras.saving.load_model(os.path.join(folder, "model.keras"))

        def call():
            return float(model.score_text(text)["log_likelihood"][0])
    else:
        signature = tf.saved_model.load(os.path.join(folder, "export", "1")).signatures[
            "score_text"]

        def call():
            return float(signature(texts=tf.constant([text]))["log_likelihood"].numpy()[0])
    log_likelihood = call()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    queue.put((log_likelihood, float(np.median(times)), peak_mb))


def _in_child(target, *args):
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    child = context.Process(target=target, args=(*args, queue))
    child.start()
    result = queue.get()
    child.join()
    return result


def _hand_loop(model, prompt_ids, steps):
    """Greedy generation with a compiled one-token step called from Python per token."""
    from keras import ops

    from psmm_tf.compiled import inference_function

    def one_token(token, state, memory):
        outputs = model(token, state=state, memory=memory, training=False)
        next_token = ops.argmax(model.log_distribution(outputs)[:, 0], axis=-1)
        return ops.cast(next_token, "int32")[:, None], outputs["state"], outputs["memory"]

    step = inference_function(model, one_token)
    batch = prompt_ids.shape[0]
    state, memory = model.zero_state(batch), model.empty_memory(batch)
    for i in range(prompt_ids.shape[1] - 1):  # read the prompt
        _, state, memory = step(prompt_ids[:, i:i + 1], state, memory)
    token, generated = prompt_ids[:, -1:], []
    for _ in range(steps):
        token, state, memory = step(token, state, memory)
        generated.append(np.asarray(token))
    return np.concatenate(generated, axis=1)


def _fit_data(preset, vocab_size, steps, rng):
    """Random ids `(x, y)` of `steps` batches of the preset's rows and `num_predicted` targets,
    and the row count."""
    from psmm_tf import configs

    train = configs.get_preset(preset).train
    rows, length = train.batch_size, train.num_predicted
    text = rng.integers(2, vocab_size, size=(steps * rows, length + 1)).astype("int32")
    return text[:, :-1], text[:, 1:], rows


def _fit_child(backend, native_mode, preset, vocab_size, seed, steps, connection):
    """Child process: builds the model on `backend`, compiles `fit` (one warm-up call), then
    answers each "fit" from the parent with the seconds of one `fit` call of `steps` steps."""
    import keras

    from psmm_tf import native

    if keras.backend.backend() != backend:
        raise RuntimeError(f"child for {backend} runs on {keras.backend.backend()}")
    if native_mode is not None:
        native.configure(mode=native_mode)
    folder = tempfile.mkdtemp(prefix="psmm-keras-task-fit-")
    try:
        model, _, _ = _build(preset, vocab_size, seed, folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    rng = np.random.default_rng(seed)
    x, y, rows = _fit_data(preset, vocab_size, steps, rng)
    model.compile()
    model.fit(x[:2 * rows], y[:2 * rows], batch_size=rows, verbose=0)  # compile
    kernels = None
    if backend == "tensorflow":  # the path fit's (unjitted) step took
        kernels = "native kernels" if native.check(native_mode, jit_compile=bool(
            model.jit_compile)) is not None else "TensorFlow ops"
    connection.send({"jit_compile": model.jit_compile, "kernels": kernels, "rows": rows,
                     "targets": x.shape[1]})
    while connection.recv() == "fit":
        start = time.perf_counter()
        model.fit(x, y, batch_size=rows, shuffle=False, verbose=0)
        connection.send(time.perf_counter() - start)


def _fit_side_by_side(backends, native_modes, preset, vocab_size, seed, steps, rounds):
    """Part 3: `fit` on each backend in a child process of its own, the children taking turns.

    Returns:
        `(labels, infos, times)`: one label per child, its `_fit_child` info dict and its
        list of `rounds` seconds per `fit` call of `steps` steps.
    """
    context = multiprocessing.get_context("spawn")
    children = []
    for backend in backends:
        for mode in (native_modes if backend == "tensorflow" else [None]):
            label = backend if mode is None else f"{backend} (native {mode})"
            parent_end, child_end = context.Pipe()
            previous = os.environ.get("KERAS_BACKEND")
            os.environ["KERAS_BACKEND"] = backend  # read when the child imports keras
            try:
                process = context.Process(target=_fit_child, args=(
                    backend, mode, preset, vocab_size, seed, steps, child_end))
                process.start()
            finally:
                if previous is None:
                    del os.environ["KERAS_BACKEND"]
                else:
                    os.environ["KERAS_BACKEND"] = previous
            children.append((label, process, parent_end, parent_end.recv()))  # warmed up
    times = {label: [] for label, *_ in children}
    try:
        for _ in range(rounds):
            for label, _, connection, _ in children:
                connection.send("fit")
                times[label].append(connection.recv())
    finally:
        for _, process, connection, _ in children:
            connection.send("stop")
            process.join()
    return ([label for label, *_ in children], {label: info for label, _, _, info in children},
            times)


def _report_fit(labels, infos, times, steps):
    reference = next((label for label in labels if label.startswith("tensorflow")), None)
    for label in labels:
        info, seconds = infos[label], np.array(times[label])
        rate = steps / np.median(seconds)
        path = f", {info['kernels']}" if info["kernels"] else ""
        line = (f"fit ({label}, jit_compile={info['jit_compile']}{path}): {rate:.2f} steps/s, "
                f"median of {len(seconds)} calls of {steps} steps of {info['rows']} rows x "
                f"{info['targets']} targets ({rate * info['rows'] * info['targets']:,.0f} "
                "targets/s)")
        if reference is not None and label != reference:
            ratios = seconds / np.array(times[reference])
            line += (f"; time / {reference}: {np.median(ratios):.3f} (rounds "
                     f"{ratios.min():.3f}-{ratios.max():.3f}; median / median "
                     f"{np.median(seconds) / np.median(times[reference]):.3f})")
        print(line)


def main(argv):
    del argv
    import keras

    rng = np.random.default_rng(FLAGS.seed)
    folder = tempfile.mkdtemp(prefix="psmm-keras-task-bench-")
    try:
        model, vocab_file, words = _build(FLAGS.preset, FLAGS.vocab_size, FLAGS.seed, folder)
        print(f"preset {FLAGS.preset} ({model.num_layers}x{model.hidden_dim}, window "
              f"{model.window_size}), V = {FLAGS.vocab_size}, Keras {keras.__version__} "
              f"({keras.backend.backend()}), {os.cpu_count()} CPUs")
        if "fit" in FLAGS.parts:
            _report_fit(*_fit_side_by_side(FLAGS.backends, FLAGS.tf_native, FLAGS.preset,
                                           FLAGS.vocab_size, FLAGS.seed, FLAGS.fit_steps,
                                           FLAGS.fit_rounds), FLAGS.fit_steps)
        if "score" in FLAGS.parts:
            _score_and_compare(model, vocab_file, words, folder, rng)
        if "generate" in FLAGS.parts:
            _generate_and_compare(model, rng)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _score_and_compare(model, vocab_file, words, folder, rng):
    """Part 1: `score_text` in Python against the SavedModel's signature."""
    from psmm_tf.export import export_saved_model

    export_saved_model.export(model, vocab_file, os.path.join(folder, "export"), version=1,
                              max_tokens=max(20_000, 2 * FLAGS.words))
    text = _long_text(words, FLAGS.words, rng)
    results = {path: _in_child(_score_child, path, folder, text, FLAGS.rounds)
               for path in ("load only", "python", "savedmodel")}
    (ll_py, t_py, mb_py), (ll_sm, t_sm, mb_sm) = results["python"], results["savedmodel"]
    np.testing.assert_allclose(ll_py, ll_sm, rtol=1e-4)  # the same numbers
    print(f"score_text of {FLAGS.words:,} words: Python {t_py:.2f} s (peak {mb_py:,.0f} MB),"
          f" SavedModel {t_sm:.2f} s (peak {mb_sm:,.0f} MB); Python / SavedModel "
          f"{t_py / t_sm:.2f}; log-likelihood {ll_py:.1f}; a process that only imports "
          f"and loads the model peaks at {results['load only'][2]:,.0f} MB")


def _generate_and_compare(model, rng):
    """Part 2: `generate` against a hand loop of one-token steps."""
    model.compile(sampler="greedy")
    model.preprocessor = None  # ids in, ids out
    length = FLAGS.prompt_words + 1 + FLAGS.generate_tokens
    ids = rng.integers(2, FLAGS.vocab_size, size=(FLAGS.batch_size, FLAGS.prompt_words + 1))
    ids[:, 0] = 1  # <eos> starts every prompt
    prompts = {"token_ids": np.zeros((FLAGS.batch_size, length), "int32"),
               "padding_mask": np.zeros((FLAGS.batch_size, length), bool)}
    prompts["token_ids"][:, :ids.shape[1]] = ids
    prompts["padding_mask"][:, :ids.shape[1]] = True
    timed = {}
    for name, run in (("generate", lambda: np.asarray(model.generate(
                          dict(prompts), stop_token_ids=None)["token_ids"])[:, ids.shape[1]:]),
                      ("hand loop", lambda: _hand_loop(model, ids.astype("int32"),
                                                       FLAGS.generate_tokens))):
        out = run()  # compile
        start = time.perf_counter()
        timed[name] = (run(), time.perf_counter() - start)
        np.testing.assert_array_equal(out, timed[name][0])
    np.testing.assert_array_equal(timed["generate"][0], timed["hand loop"][0])
    tokens = FLAGS.batch_size * FLAGS.generate_tokens
    rate = {name: tokens / seconds for name, (_, seconds) in timed.items()}
    print(f"greedy generation of {FLAGS.generate_tokens} tokens x {FLAGS.batch_size} "
          f"prompts: generate {rate['generate']:,.0f} tokens/s, hand loop "
          f"{rate['hand loop']:,.0f} tokens/s; generate / hand loop "
          f"{rate['generate'] / rate['hand loop']:.2f} (same tokens)")


if __name__ == "__main__":
    app.run(main)
