r"""Input-pipeline throughput against the `medium` model's training consumption.

Iterates `psmm_tf.data.training_windows` over PTB train (`--data_dir`) for a few seconds
per pointer-memory mode, alone, and reports elements/s, windows/s (one window = one stream's row
of an element) and tokens/s. It then times real training steps of the `medium`
`PointerSentinelLM` (forward, eq. 9 loss, gradients, global-norm clipping, SGD) fed with
elements of the same datasets, and prints the ratio pipeline rate / training consumption: the
pipeline must never limit training (target >= 20x). Where the model code is absent, pass the
step time with --step_time_s.

Modes at the paper's settings (batch 32, L = 100):
  recompute   C = 99, T = 1   (the paper's k1 = 1, k2 = L)
  cache       C = 0,  T = 100 (memory of the previous window carried)

Usage:
  python benchmarks/input_pipeline.py --data_dir=/data/ptb
  python benchmarks/input_pipeline.py --data_dir=/data/ptb --seconds=5 --train_steps=3 --jit=off
  python benchmarks/input_pipeline.py --data_dir=/data/ptb --train_steps=0 --step_time_s=0.5
"""

import dataclasses
import json
import time

import keras
import tensorflow as tf
from absl import app, flags

from psmm_tf import data

FLAGS = flags.FLAGS
flags.DEFINE_string("data_dir", None, "Folder with ptb.train.txt[.gz].", required=True)
flags.DEFINE_list("modes", ["recompute", "cache"], "Pointer-memory modes to measure.")
flags.DEFINE_integer("batch_size", 32, "Streams per batch (medium: 32).")
flags.DEFINE_integer("window_size", 100, "Pointer window L (medium: 100).")
flags.DEFINE_float("seconds", 5.0, "Seconds of pipeline iteration per mode.")
flags.DEFINE_integer("train_steps", 3, "Timed training steps per mode (0: use --step_time_s).")
flags.DEFINE_bool("jit", False, "XLA-compile the training step.")
flags.DEFINE_float("step_time_s", None, "Training step time in seconds, when not measured.")

MODES = {"recompute": lambda L: (L - 1, 1), "cache": lambda L: (0, L)}


def pipeline_rate(dataset, seconds):
    """Elements/s of iterating `dataset` (repeated) for about `seconds`, after a warm-up."""
    iterator = iter(dataset.repeat())
    for _ in range(10):
        next(iterator)
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(100):
            next(iterator)
        count += 100
    return count / (time.perf_counter() - start)


def model_api():
    """(build_model, get_preset, PointerSentinelLoss) where they exist, else None."""
    try:
        from psmm_tf.configs import get_preset
        from psmm_tf.losses import PointerSentinelLoss
        from psmm_tf.models import build_model

        get_preset("medium")
    except (ImportError, AttributeError, ValueError):
        return None
    return build_model, get_preset, PointerSentinelLoss


def training_step_time(api, vocab_size, dataset, context_length, steps, jit):
    """Mean seconds of a `medium` PSMM training step on `steps` elements of `dataset`."""
    build_model, get_preset, loss_cls = api
    config = get_preset("medium")
    model = build_model(dataclasses.replace(config.model, kind="psmm", vocab_size=vocab_size,
                                            seed=0))
    optimizer = keras.optimizers.SGD(learning_rate=config.train.learning_rate)
    loss_fn, clip_norm = loss_cls(), config.train.clip_norm
    carry_memory = context_length == 0  # cache mode carries the memory; recompute does not.

    @tf.function(jit_compile=jit)
    def step(batch, state, memory):
        with tf.GradientTape() as tape:
            outputs = model(
                batch["token_ids"],
                token_mask=batch["token_mask"],
                state=state,
                memory=memory,
                context_length=context_length,
                targets=batch["targets"],
                training=True,
            )
            loss = loss_fn(batch["targets"], outputs, sample_weight=batch["target_weights"])
        grads = tape.gradient(loss, model.trainable_variables)
        grads, _ = tf.clip_by_global_norm(grads, clip_norm)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss, outputs["state"], outputs["memory"] if carry_memory else memory

    # Elements fetched before timing: the step time must not include the pipeline.
    batches = list(dataset.take(steps + 1))
    state = model.zero_state(FLAGS.batch_size)
    memory = model.empty_memory(FLAGS.batch_size) if carry_memory else None
    loss, state, memory = step(batches[0], state, memory)  # trace (and compile)
    float(loss)
    start = time.perf_counter()
    for batch in batches[1:]:
        loss, state, memory = step(batch, state, memory)
        float(loss)  # wait for the step to finish
    return (time.perf_counter() - start) / steps


def main(argv):
    del argv
    tokens = data.read_tokens(_split_file(FLAGS.data_dir))
    vocab = data.Vocabulary.build(tokens)
    ids = vocab.encode(tokens)
    print(
        f"PTB train: {len(ids):,} tokens, vocabulary {len(vocab):,}, "
        f"batch {FLAGS.batch_size}, L = {FLAGS.window_size}"
    )
    api = model_api() if FLAGS.train_steps > 0 else None
    if api is None and FLAGS.step_time_s is None:
        raise app.UsageError(
            "No model to time (psmm_tf.models/configs missing or "
            "--train_steps=0): pass --step_time_s."
        )
    results = []
    for mode in FLAGS.modes:
        context, predicted = MODES[mode](FLAGS.window_size)
        dataset = data.training_windows(ids, FLAGS.batch_size, context, predicted)
        rate = pipeline_rate(dataset, FLAGS.seconds)
        if api is not None:
            step_time = training_step_time(
                api, len(vocab), dataset, context, FLAGS.train_steps, FLAGS.jit
            )
            source = f"measured, {FLAGS.train_steps} steps, jit={FLAGS.jit}"
        else:
            step_time, source = FLAGS.step_time_s, "--step_time_s"
        windows = rate * FLAGS.batch_size
        result = {
            "mode": mode,
            "context_length": context,
            "num_predicted": predicted,
            "pipeline_elements_per_s": rate,
            "pipeline_windows_per_s": windows,
            "pipeline_predicted_tokens_per_s": windows * predicted,
            "pipeline_input_tokens_per_s": windows * (context + predicted),
            "train_step_s": step_time,
            "train_step_source": source,
            "train_elements_per_s": 1.0 / step_time,
            "ratio": rate * step_time,
        }
        results.append(result)
        print(
            f"{mode:>9} C={context:<3} T={predicted:<3} pipeline {rate:9.1f} elements/s "
            f"= {windows:11,.0f} windows/s = {windows * predicted:12,.0f} predicted tokens/s "
            f"({windows * (context + predicted):,.0f} input tokens/s) | training "
            f"{1.0 / step_time:7.2f} steps/s ({step_time * 1000:.0f} ms, {source}) | "
            f"ratio {rate * step_time:,.0f}x {'OK' if rate * step_time >= 20 else 'LOW'}"
        )
    print(json.dumps({"device": _device(), "results": results}))


def _split_file(directory):
    files = data.find_split_files(directory, "ptb")
    if "train" not in files:
        raise app.UsageError(f"No ptb.train.txt[.gz] in {directory} (--data_dir).")
    return files["train"]


def _device():
    gpus = tf.config.list_physical_devices("GPU")
    return (
        tf.config.experimental.get_device_details(gpus[0]).get("device_name", "GPU")
        if gpus
        else "CPU"
    )


if __name__ == "__main__":
    app.run(main)
