"""The comparison table reads each run's model.keras perplexities (calibrated gate included)."""

import unittest

from psmm_tf.training.comparison import format_comparison


def _run(valid, test, **extra):
    return {"best_valid_perplexity": valid, "test_perplexity": test, "epochs": 2,
            "train_seconds": 10.0, **extra}


class FormatComparisonTest(unittest.TestCase):
    def test_calibrated_gate_is_the_model_compared(self):
        text = format_comparison({
            "psmm": _run(10.0, 9.5, calibrated_valid_perplexity=9.0,
                         gate_calibration={"gate_calibration": [0.5, 0.25]}),
            "lstm": _run(18.0, 19.0)})
        lines = text.splitlines()
        self.assertEqual(lines[1].split(), ["psmm", "9.00", "9.50", "2", "10.0"])
        self.assertEqual(lines[2].split(), ["lstm", "18.00", "19.00", "2", "10.0"])
        self.assertIn("psmm / lstm: valid perplexity ratio 0.500, test perplexity ratio 0.500",
                      text)
        self.assertIn("psmm gate calibrated on valid: logit x 0.50 +0.25 (valid 10.00 with the "
                      "trained gate)", text)

    def test_without_calibration_the_trained_gate_is_compared(self):
        text = format_comparison({"psmm": _run(9.0, 9.5), "lstm": _run(18.0, 19.0)})
        self.assertIn("valid perplexity ratio 0.500", text)
        self.assertNotIn("calibrated", text)


if __name__ == "__main__":
    unittest.main()
