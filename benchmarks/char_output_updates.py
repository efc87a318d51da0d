"""How the character-LSTM output layer is fed its updates, at equal training time.

Trains `CharacterLSTMOutput` on a finished run's frozen model (as psmm-train --char_output_on
does) once per scheme, each for the same seconds of training, and prints the validation
perplexities (character LSTM, and with a pointer the open-vocabulary mixture) at three marks.
A scheme is `words_per_update:shuffle_words:learning_rate`; one update per training window,
the frozen model's `B x T` words in corpus order, is `B*T:B*T:lr` (700:700:0.01 at `small`).
Evaluation and the first update (its tracing) are not counted, the frozen model's reads are;
the schemes run one after another in one process.

  python benchmarks/char_output_updates.py --base_run=/runs/wiki_psmm --seconds=240 \\
    --schemes=700:700:0.01,700:200000:0.01,128:200000:0.003,128:200000:0.01 \\
    --eval_tokens=40000
"""

import dataclasses
import time

import keras
import numpy as np
from absl import app, flags

from psmm_tf.training import char_output_training as lib

flags.DEFINE_string("base_run", None, "A finished psmm-train run's workdir.", required=True)
flags.DEFINE_list("schemes", ["700:700:0.01", "700:200000:0.01", "128:200000:0.003",
                              "128:200000:0.01"],
                  "words_per_update:shuffle_words:learning_rate of each scheme.")
flags.DEFINE_float("seconds", 240.0, "Training seconds of each scheme.", lower_bound=1.0)
flags.DEFINE_integer("marks", 3, "Evaluations per scheme, evenly spaced in time.",
                     lower_bound=1)
flags.DEFINE_integer("eval_tokens", 40_000, "Validation tokens scored at each mark.",
                     lower_bound=2)
flags.DEFINE_integer("seed", 0, "Seed of the layer, its dropout and the shuffles.")
FLAGS = flags.FLAGS


def _scheme(text):
    """`words:buffer:lr` -> CharOutputConfig fields; ValueError naming the scheme."""
    try:
        words, buffer, rate = text.split(":")
        return {"words_per_update": int(words), "shuffle_words": int(buffer),
                "learning_rate": float(rate)}
    except ValueError:
        raise ValueError(f"--schemes: {text!r} is not words_per_update:shuffle_words:"
                         f"learning_rate (e.g. 128:200000:0.003).") from None


def _train_for(config, run, splits, seconds, marks, eval_tokens):
    """[(seconds, updates, epochs of words, validation report)] at each mark."""
    keras.utils.set_random_seed(config.seed)
    model = lib.build_char_output_model(config, run.model)
    optimizer = keras.optimizers.Adam(config.learning_rate)
    optimizer.build(model.char_output.trainable_variables)
    train_step = lib.make_train_step(model, optimizer, config.clip_norm)
    read = lib.make_reader(model.base_model)
    train = run.config.train
    words_in_split = len(splits["train"].ids) - 1
    elapsed, updates, words, epoch, rows = 0.0, 0, 0, 0, []
    while len(rows) < marks:
        rng = np.random.default_rng([config.seed, epoch])
        windows = lib.frozen_windows(read, model.base_model, splits["train"], train.batch_size,
                                     train.num_predicted)
        started = time.perf_counter()
        for hidden, chars in lib.shuffled_word_batches(
                windows, config.words_per_update, config.shuffle_words, rng):
            update_started = time.perf_counter()
            float(train_step(hidden, chars)[0])
            updates, words = updates + 1, words + len(hidden)
            if updates == 1:  # the first update traces the step: not counted (the frozen
                started += time.perf_counter() - update_started  # model's reads are)
            now = elapsed + time.perf_counter() - started
            if now >= seconds * (len(rows) + 1) / marks:
                report = lib.evaluate_char_output(model, splits["valid"], train.eval_length,
                                                  eval_tokens)
                rows.append((now, updates, words / words_in_split, report))
                elapsed, started = now, time.perf_counter()
                if len(rows) == marks:
                    break
        else:
            elapsed += time.perf_counter() - started
            epoch += 1
    return rows


def main(argv):
    del argv
    try:
        schemes = [_scheme(text) for text in FLAGS.schemes]
    except ValueError as err:
        raise app.UsageError(str(err)) from None
    base = lib.CharOutputConfig(base_workdir=FLAGS.base_run, seed=FLAGS.seed)
    run, splits = lib.load_base(base)
    pointer = getattr(run.model, "has_pointer", False)
    print(f"| words/update : buffer : lr | seconds | updates | epochs | char LSTM"
          f"{' | open vocabulary' if pointer else ''} |")
    print(f"|---|---:|---:|---:|---:{'|---:' if pointer else ''}|")
    for text, fields in zip(FLAGS.schemes, schemes, strict=True):
        config = dataclasses.replace(base, **fields)
        for seconds, updates, epochs, report in _train_for(
                config, run, splits, FLAGS.seconds, FLAGS.marks, FLAGS.eval_tokens):
            open_part = f" | {report['open_perplexity']:.1f}" if pointer else ""
            print(f"| {text} | {seconds:.0f} | {updates} | {epochs:.2f} | "
                  f"{report['char_perplexity']:.1f}{open_part} |", flush=True)


if __name__ == "__main__":
    app.run(main)
