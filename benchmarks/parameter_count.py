r"""Prints the parameter count of every preset: the LSTM LM and PSMM (LSTM + H^2 + 2H).

Usage: python benchmarks/parameter_count.py --vocab_size=10000 [--build]
With --build it also builds each model and checks Keras' count against the arithmetic.
"""

import keras
from absl import app, flags

from psmm_tf import configs
from psmm_tf.models import build_model
from psmm_tf.models.parameters import parameter_table

FLAGS = flags.FLAGS
flags.DEFINE_integer("vocab_size", 10000, "Softmax vocabulary size (PTB: 10,000).")
flags.DEFINE_bool("build", False, "Also build the models and compare with count_params().")


def main(argv):
    del argv
    print(f"{'preset':8} {'lstm':>12} {'psmm':>12} {'pointer share':>14}")
    for name, lstm, psmm, share in parameter_table(FLAGS.vocab_size):
        print(f"{name:8} {lstm:12,d} {psmm:12,d} {share:14.2%}")
        if FLAGS.build:
            model_config = configs.dataclasses.replace(
                configs.get_preset(name).model, kind="psmm", vocab_size=FLAGS.vocab_size)
            built = build_model(model_config).count_params()
            status = "ok" if built == psmm else "MISMATCH"
            print(f"{'':8} built PSMM: {built:,d} ({status})")
            keras.backend.clear_session()


if __name__ == "__main__":
    app.run(main)
