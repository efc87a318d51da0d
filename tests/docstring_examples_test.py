"""Every ```python example in the library's docstrings runs, as written, in a fresh namespace.

keras-hub's classes teach by example; these examples are executed so they stay true. Each
imports what it uses (no names are provided), and runs in a temporary working folder. An
example whose first line is a `# Needs ...` comment (a finished training run) is not run.
"""

import ast
import os
import re
import tempfile
import unittest

import keras
from absl.testing import parameterized

from psmm_tf.models import registry
from psmm_tf.testing import REPO_ROOT

EXAMPLE = re.compile(r"^( *)```python\n(.*?)^\1```", re.S | re.M)


def docstring_examples():
    """`(name, code)` of every example in a docstring of psmm_tf, export/ and trainers/."""
    found = []
    for folder in ("psmm_tf", "export", "trainers"):
        for path in sorted((REPO_ROOT / folder).rglob("*.py")):
            if path.name.endswith("_test.py"):
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef)):
                    continue
                doc = ast.get_docstring(node, clean=False) or ""
                for number, match in enumerate(EXAMPLE.finditer(doc)):
                    indent = len(match.group(1))
                    code = "\n".join(line[indent:] for line in match.group(2).split("\n"))
                    name = f"{path.relative_to(REPO_ROOT)}:{getattr(node, 'name', '')}:{number}"
                    found.append((name, code))
    return found


class DocstringExamplesTest(parameterized.TestCase):

    def test_the_public_classes_have_examples(self):
        names = {name.split(":")[1] for name, _ in docstring_examples()}
        for cls in ("LSTMBackbone", "PointerSentinelLM", "LSTMLanguageModel", "PointerSoftmaxLM",
                    "InputOutputGateLM", "PointerSentinel", "PointerSoftmax", "CNNSoftmax",
                    "SampledSoftmax", "ZoneoutLSTM", "LockedDropout", "InputOutputGate",
                    "PointerSentinelLoss", "Evaluator", "NeuralCache", "TrainStep"):
            self.assertIn(cls, names)

    @parameterized.named_parameters(*[(name, code) for name, code in docstring_examples()])
    def test_example_runs(self, code):
        if code.startswith("# Needs"):
            self.skipTest(code.splitlines()[0])
        if "tensorflow" in code and keras.backend.backend() != "tensorflow":
            self.skipTest("a TensorFlow example")
        cwd, registered = os.getcwd(), registry.model_kinds()
        with tempfile.TemporaryDirectory() as folder:
            os.chdir(folder)
            try:
                exec(compile(code, "<docstring example>", "exec"), {"__name__": "example"})
            finally:
                os.chdir(cwd)
                for kind in set(registry.model_kinds()) - set(registered):
                    registry.unregister_model(kind)  # an example may register a model


if __name__ == "__main__":
    unittest.main()
