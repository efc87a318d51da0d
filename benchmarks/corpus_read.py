r"""Reading a corpus's training split three ways, side by side in one process.

  plain        `psmm_tf.data.corpus.load_splits` on the files (no TFDS).
  as_dataset   the prepared TFDS dataset through `builder.as_dataset` (batches of 4,096).
  shards       the prepared TFRecord shards parsed in batches of 4,096 (`tfds_corpus`, the
               package's path).
Each row is timed --repeats times, interleaved; the three token lists must be equal.

Usage:
  python benchmarks/corpus_read.py --dataset=ptb --data_dir=/data/ptb
"""

import tempfile
import time

import numpy as np
from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_string("dataset", "ptb", "ptb, wikitext2, wikitext103 or text.")
flags.DEFINE_string("data_dir", None, "Folder of the corpus files.")
flags.DEFINE_string("split", "train", "Corpus split to read (train, valid, test).")
flags.DEFINE_integer("repeats", 3, "Timed reads per row.", lower_bound=1)
flags.mark_flag_as_required("data_dir")


def main(argv):
    del argv
    import tensorflow_datasets as tfds

    from psmm_tf.data import corpus, tfds_corpus

    tfds_split = {"train": "train", "valid": "validation", "test": "test"}[FLAGS.split]
    start = time.perf_counter()
    builder = tfds_corpus.prepared_builder(FLAGS.dataset, FLAGS.data_dir,
                                           tempfile.mkdtemp(prefix="corpus_read_"))
    print(f"prepare once: {time.perf_counter() - start:.2f} s")

    def through_as_dataset():
        tokens = []
        batches = builder.as_dataset(split=tfds_split, shuffle_files=False, batch_size=4096)
        for batch in tfds.as_numpy(batches):
            for line in batch["text"]:
                tokens.extend(line.decode("utf-8").split())
                tokens.append(corpus.EOS_TOKEN)
        return tokens

    rows = {
        "plain": lambda: corpus.load_splits(FLAGS.data_dir, FLAGS.dataset)[FLAGS.split],
        "as_dataset": through_as_dataset,
        "shards": lambda: tfds_corpus.read_split(builder, tfds_split),
    }
    times, results = {name: [] for name in rows}, {}
    for _ in range(FLAGS.repeats):
        for name, read in rows.items():
            start = time.perf_counter()
            results[name] = read()
            times[name].append(time.perf_counter() - start)
    if not results["plain"] == results["as_dataset"] == results["shards"]:
        raise SystemExit("The three reads gave different tokens.")
    print(f"{FLAGS.dataset} {FLAGS.split}: {len(results['plain']):,} tokens, the same from each "
          f"row; median of {FLAGS.repeats}")
    for name, values in times.items():
        print(f"{name:11} {np.median(values):6.2f} s")


if __name__ == "__main__":
    app.run(main)
