r"""Serving latency and throughput: the exported SavedModel against the Keras model's `score()`.

Both paths do the same work per request: tokenize a batch of sentences (20-100 tokens, random
vocabulary words) as training does, score every token after a leading `<eos>`, and return
per-token log-probabilities and the gate. The SavedModel path is one call of `serving_default`
on `tf.saved_model.load` of a fresh `psmm-export` (tokenization, lookup, checks and model in the
graph); the Keras path tokenizes in Python (`str.split`, `Vocabulary.encode`), pads, and calls
`model.score_with_state(inputs, targets, padding_mask)`. Requests of the two paths are
interleaved (A B A B ...) so that load from elsewhere on a shared machine hits both alike.

Reported, per batch size (1 and 32 sentences per request): latency p50 and p99 in ms and
scored tokens/s, side by side, and the ratio Keras time / SavedModel time (> 1: the SavedModel
is faster). Weights are random: speed does not depend on them.

Usage:
  python benchmarks/serving.py --preset=small --requests=300 --batch_requests=40
"""

import os
import shutil
import tempfile
import time

import numpy as np
import tensorflow as tf
from absl import app, flags

from psmm_tf import configs
from psmm_tf.data import Vocabulary
from psmm_tf.export import export_saved_model
from psmm_tf.export.tokenization import reference_tokens
from psmm_tf.models import build_model

FLAGS = flags.FLAGS
flags.DEFINE_string("preset", "small", "Model preset.")
flags.DEFINE_integer("vocab_size", 10000, "Vocabulary size (PTB: 10,000).")
flags.DEFINE_integer("requests", 300, "Timed requests of one sentence, per path.")
flags.DEFINE_integer("batch_requests", 40, "Timed requests of `batch_size` sentences, per path.")
flags.DEFINE_integer("batch_size", 32, "Sentences per request of the batch rows.")
flags.DEFINE_integer("min_tokens", 20, "Shortest sentence (words).")
flags.DEFINE_integer("max_tokens", 100, "Longest sentence (words).")
flags.DEFINE_integer("seed", 0, "Seed of the sentences and weights.")


def sentences(words, count, rng):
    """`count` sentences of `min_tokens..max_tokens` random words."""
    lengths = rng.integers(FLAGS.min_tokens, FLAGS.max_tokens + 1, size=count)
    return [" ".join(rng.choice(words, size=n)) for n in lengths]


def keras_request(model, vocab, texts):
    """The Keras path: Python tokenization, padding and `model.score_with_state`; returns
    (lp, gate)."""
    ids = [vocab.encode(reference_tokens(text)) for text in texts]
    time_steps = max(len(x) for x in ids)
    targets = np.zeros([len(ids), time_steps], np.int32)
    mask = np.zeros([len(ids), time_steps], bool)
    for row, x in enumerate(ids):
        targets[row, :len(x)], mask[row, :len(x)] = x, True
    inputs = np.concatenate([np.full([len(ids), 1], vocab.eos_id, np.int32), targets[:, :-1]],
                            axis=1)
    out = model.score_with_state(inputs, targets, padding_mask=mask)
    return out["log_probs"].numpy(), np.where(mask, out["gate"].numpy(), 0.0)  # as served


def saved_model_request(signature, texts):
    """The SavedModel path: one `serving_default` call; returns (log_probs, gate)."""
    out = signature(texts=tf.constant(texts))
    return out["log_probs"].numpy(), out["gate"].numpy()


def measure(requests, paths):
    """Interleaved timing: {path name: seconds per request (list)}."""
    times = {name: [] for name in paths}
    for texts in requests:
        for name, run in paths.items():
            start = time.perf_counter()
            run(texts)
            times[name].append(time.perf_counter() - start)
    return times


def report(label, times, tokens_per_request):
    """Prints p50/p99 latency and tokens/s per path, and the Keras / SavedModel ratios."""
    stats = {}
    for name, seconds in times.items():
        seconds = np.array(seconds)
        stats[name] = (np.percentile(seconds, 50) * 1e3, np.percentile(seconds, 99) * 1e3,
                       tokens_per_request * len(seconds) / seconds.sum())
        print(f"  {label:14s} {name:11s} p50 {stats[name][0]:8.2f} ms   p99 {stats[name][1]:8.2f}"
              f" ms   {stats[name][2]:10.0f} tokens/s")
    keras, saved = stats["keras"], stats["savedmodel"]
    print(f"  {label:14s} ratio keras/savedmodel: p50 {keras[0] / saved[0]:.2f}x   "
          f"p99 {keras[1] / saved[1]:.2f}x   throughput {saved[2] / keras[2]:.2f}x")
    return stats


def main(argv):
    del argv
    rng = np.random.default_rng(FLAGS.seed)
    config = configs.get_preset(FLAGS.preset).replace(
        model={"vocab_size": FLAGS.vocab_size, "seed": FLAGS.seed})
    words = ["<unk>", "<eos>"] + [f"w{i}" for i in range(FLAGS.vocab_size - 2)]
    folder = tempfile.mkdtemp(prefix="psmm-serving-bench-")
    try:
        vocab_file = os.path.join(folder, "vocab.txt")
        Vocabulary(words).save(vocab_file)
        vocab = Vocabulary.load(vocab_file)
        model = build_model(config.model)
        export_dir = export_saved_model.export(model, vocab_file, os.path.join(folder, "base"))
        signature = tf.saved_model.load(export_dir).signatures["serving_default"]
        paths = {"savedmodel": lambda texts: saved_model_request(signature, texts),
                 "keras": lambda texts: keras_request(model, vocab, texts)}
        print(f"preset {FLAGS.preset} ({config.model.num_layers}x{config.model.hidden_dim}, "
              f"window {config.model.window_size}), V = {FLAGS.vocab_size}, "
              f"{FLAGS.min_tokens}-{FLAGS.max_tokens} words per sentence, "
              f"TF {tf.__version__}, {os.cpu_count()} CPUs")
        check = sentences(words[2:], 4, rng)
        for a, b in zip(paths["savedmodel"](check), paths["keras"](check), strict=True):
            np.testing.assert_allclose(a, b, atol=1e-4)  # the two paths compute the same
        for batch_size, count in ((1, FLAGS.requests), (FLAGS.batch_size, FLAGS.batch_requests)):
            warm = [sentences(words[2:], batch_size, rng) for _ in range(10)]
            measure(warm, paths)  # traces (Keras retraces per shape until relaxed) and caches
            requests = [sentences(words[2:], batch_size, rng) for _ in range(count)]
            tokens = np.mean([sum(len(t.split()) + 1 for t in r) for r in requests])
            report(f"{batch_size} sentence(s)", measure(requests, paths), tokens)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    app.run(main)
