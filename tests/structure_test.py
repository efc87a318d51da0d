"""The package's shape: no import cycle, thin entry points, run file names in one place.

Modules are read with `ast`, never imported: function-level imports count as much as the ones
at the top of a file. An import names the module it reads (`from psmm_tf.training import
checkpointing` -> `psmm_tf.training.checkpointing`; `from psmm_tf.models import build_model`
-> `psmm_tf.models`), as import-linter and pydeps count them.
"""

import ast
import unittest
from pathlib import Path

from psmm_tf import workdir as run_files

REPO_ROOT = Path(__file__).resolve().parent.parent
# The source folders and the package names they are installed as (setup.py's package_dir).
PACKAGES = {"psmm_tf": REPO_ROOT / "psmm_tf", "psmm_tf.trainers": REPO_ROOT / "trainers",
            "psmm_tf.export": REPO_ROOT / "export"}
ENTRY_POINTS = ("export/export_saved_model.py", "trainers/train.py", "trainers/evaluate.py",
                "export/score.py")
MAX_ENTRY_POINT_LINES = 120
# The rooms of the package, lowest first (docs/architecture.md states the same order). A module
# imports modules of its own room and of the rooms below it, never of a room above. An entry
# names a module or a package (its modules with it); "psmm_tf" itself is the package's
# __init__.py (its public names) only. Every module is in exactly one room.
ROOMS = (
    # Foundations: import nothing of psmm_tf's other rooms (native: the kernels' room).
    ("psmm_tf.configs", "psmm_tf.compiled", "psmm_tf.native_logs", "psmm_tf.native",
     "psmm_tf.checkpoints"),
    ("psmm_tf.data",),
    ("psmm_tf.layers",),
    ("psmm_tf.losses",),
    ("psmm_tf.models",),
    ("psmm_tf.workdir",),  # a run's files: read by evaluation, export and training
    ("psmm_tf.evaluation",),
    ("psmm_tf.training", "psmm_tf.gradients", "psmm_tf.optimizers", "psmm_tf.jax_train_step"),
    ("psmm_tf",),
    ("psmm_tf.cli",),
    ("psmm_tf.export", "psmm_tf.trainers"),
)


def library_modules():
    """{module name: path} of every non-test module of the installed package."""
    modules = {}
    for package, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            relative = path.relative_to(folder)
            if path.name.endswith("_test.py") or path.name == "testing.py" or (
                    package == "psmm_tf" and relative.parts[0] in ("trainers", "export")):
                continue
            parts = [package, *relative.with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def imported_modules(name, path, known):
    """The modules of `known` that module `name` (at `path`) imports, anywhere in the file."""
    is_package = path.name == "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".")[: len(name.split(".")) - node.level + is_package]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                       for alias in node.names]
        else:
            continue
        for target in targets:
            parts = target.split(".")
            # The module itself, or the package that holds the imported name.
            prefixes = [".".join(parts[:i]) for i in range(len(parts), 0, -1)]
            found.update([p for p in prefixes if p in known][:1])
    return {module for module in found & set(known) if module != name}


def room_of(name, rooms=ROOMS):
    """The index in `rooms` of module `name`'s room (its longest entry), or None."""
    best = None
    for index, room in enumerate(rooms):
        for entry in room:
            nested = entry != "psmm_tf" and name.startswith(entry + ".")
            if (name == entry or nested) and (best is None or len(entry) > len(best[1])):
                best = (index, entry)
    return None if best is None else best[0]


def upward_imports(graph, rooms=ROOMS):
    """"module -> imported module" for every import of `graph` into a higher room."""
    # A module in no room is test_every_module_is_in_one_room's finding, not this one's.
    def room(module):
        found = room_of(module, rooms)
        return -1 if found is None else found

    return sorted(f"{name} -> {target}" for name, targets in graph.items()
                  for target in targets if room(target) > room(name))


def find_cycle(graph):
    """One cycle of `graph` ({node: set of nodes}) as a list, or None."""
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        state[node] = "done"
        stack.pop()
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


class StructureTest(unittest.TestCase):
    def test_the_graph_is_read(self):
        modules = library_modules()
        graph = {name: imported_modules(name, path, modules) for name, path in modules.items()}
        self.assertIn("psmm_tf.workdir", graph["psmm_tf.evaluation.trained_run"])
        self.assertIn("psmm_tf.export.export_lib", graph["psmm_tf.export.export_saved_model"])
        self.assertEqual(find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}), ["a", "b", "c", "a"])
        self.assertIsNone(find_cycle({"a": {"b"}, "b": set()}))

    def test_no_import_cycle(self):
        modules = library_modules()
        graph = {name: imported_modules(name, path, modules) for name, path in modules.items()}
        cycle = find_cycle(graph)
        self.assertIsNone(cycle, f"import cycle: {' -> '.join(cycle or [])}")

    def test_layers_come_before_their_users(self):
        # Training uses evaluation (the Evaluator), never the reverse; the core (layers,
        # losses, models, data) uses neither.
        modules = library_modules()
        below = {"psmm_tf.evaluation": ("psmm_tf.training",),
                 "psmm_tf.data": ("psmm_tf.training", "psmm_tf.evaluation"),
                 "psmm_tf.models": ("psmm_tf.training", "psmm_tf.evaluation"),
                 "psmm_tf.layers": ("psmm_tf.training", "psmm_tf.evaluation"),
                 "psmm_tf.losses": ("psmm_tf.training", "psmm_tf.evaluation")}
        self.assertIn("psmm_tf.evaluation.evaluator",
                      imported_modules("psmm_tf.training.train_lib",
                                       modules["psmm_tf.training.train_lib"], modules))
        for name, path in modules.items():
            forbidden = next((v for k, v in below.items() if name.startswith(k)), ())
            for target in imported_modules(name, path, modules):
                with self.subTest(module=name, imports=target):
                    self.assertFalse(target.startswith(forbidden), f"{name} imports {target}")

    def test_every_module_is_in_one_room(self):
        unplaced = sorted(name for name in library_modules() if room_of(name) is None)
        self.assertEqual(unplaced, [], "add these modules to a room of ROOMS (and to "
                                       "docs/architecture.md)")

    def test_rooms_are_read(self):
        # The check can fail: an import into a higher room is found, one below is not.
        rooms = (("p.low",), ("p.mid",), ("p",), ("p.high",))
        graph = {"p.low.a": {"p.mid.b"}, "p.mid.b": {"p.low.a"}, "p": {"p.mid.b"},
                 "p.high": {"p"}, "p.mid.c": {"p"}}
        self.assertEqual(upward_imports(graph, rooms), ["p.low.a -> p.mid.b", "p.mid.c -> p"])
        self.assertEqual(room_of("psmm_tf.layers.dense"), room_of("psmm_tf.layers"))
        self.assertEqual(room_of("psmm_tf"), room_of("psmm_tf.cli") - 1)
        self.assertIsNone(room_of("psmm_tf.unplaced_module"))

    def test_no_import_into_a_higher_room(self):
        modules = library_modules()
        graph = {name: imported_modules(name, path, modules) for name, path in modules.items()}
        self.assertEqual(upward_imports(graph), [], "imports from a lower room into a higher "
                                                    "one (ROOMS, docs/architecture.md)")

    def test_entry_points_are_thin(self):
        for entry_point in ENTRY_POINTS:
            with self.subTest(entry_point=entry_point):
                lines = (REPO_ROOT / entry_point).read_text().count("\n")
                self.assertLess(lines, MAX_ENTRY_POINT_LINES)

    def test_tests_share_helpers_through_testing_modules_only(self):
        # Helpers live in psmm_tf/testing.py, export/testing.py or tests/train_testlib.py.
        folders = [*PACKAGES.values(), REPO_ROOT / "tests"]
        for path in sorted(p for folder in folders for p in folder.rglob("*_test.py")
                           if ".venv" not in p.parts):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not isinstance(node, (ast.Import, ast.ImportFrom)):
                    continue
                # `import a.b_test`, `from a.b_test import f` and `from a import b_test`.
                names = [alias.name for alias in node.names] + [getattr(node, "module", None)
                                                                or ""]
                for name in names:
                    with self.subTest(test=str(path.relative_to(REPO_ROOT)), imports=name):
                        self.assertFalse(name.endswith("_test"), f"{path} imports {name}")

    def test_run_file_names_are_spelled_in_workdir_only(self):
        names = {run_files.CONFIG_FILE, run_files.VOCAB_HASH_FILE, run_files.LOCK_FILE,
                 run_files.CHECKPOINT_DIR, run_files.MODEL_FILE, run_files.HISTORY_FILE,
                 run_files.STEPS_FILE, run_files.RESULTS_FILE, run_files.INITIAL_POINTER_FILE,
                 run_files.TENSORBOARD_DIR, run_files.SYNTHETIC_DATA_DIR, run_files.VOCAB_FILE}
        # The generated corpus has its own vocab.txt (a data folder, not a run's).
        # A run folder is a preset folder: the model file's name is the presets' (workdir.py
        # imports it from there).
        allowed = {"psmm_tf/workdir.py": names, "psmm_tf/data/synthetic.py": {"vocab.txt"},
                   "psmm_tf/models/presets.py": {run_files.MODEL_FILE}}
        found = []
        for path in library_modules().values():
            relative = str(path.relative_to(REPO_ROOT))
            tree = ast.parse(path.read_text(encoding="utf-8"))
            docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                          if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef))
                          and node.body and isinstance(node.body[0], ast.Expr)}
            for node in ast.walk(tree):
                if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                        and id(node) not in docstrings):
                    spelled = {n for n in names if node.value.strip("/") == n
                               or node.value.endswith("/" + n)}
                    spelled -= allowed.get(relative, set())
                    if spelled:
                        found.append(f"{relative}:{node.lineno} {sorted(spelled)}")
        self.assertEqual(found, [])

    def test_one_scoring_routine(self):
        # Scoring (run the model, log p of the targets, zero what is masked) is
        # `ScoringMixin.score_step`; the evaluator, the neural cache, the pointer diagnostics
        # and the serving module call it. Besides it, only the training objective and the
        # input-to-output gate's delegation call a model's `log_prob`.
        allowed = {"psmm_tf/models/language_model.py", "psmm_tf/models/input_output_gate_lm.py",
                   "psmm_tf/losses/objective.py"}
        callers = set()
        for path in library_modules().values():
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and node.func.attr == "log_prob"):
                    callers.add(str(path.relative_to(REPO_ROOT)))
        self.assertEqual(callers, allowed)

    def test_one_loader(self):
        # A `.keras` file is read by `presets.read_model_file` and a checkpoint restored into
        # a model by `workdir.restore_model` (over `checkpoints.restore_first_readable`, the
        # one loop that skips damaged checkpoints); every other loader calls them.
        readers = {"load_model": set(), "restore": set()}
        for path in library_modules().values():
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                    continue
                name = str(path.relative_to(REPO_ROOT))
                if node.func.attr == "load_model" and ast.unparse(node.func.value) in (
                        "keras.saving", "keras.models", "saving"):
                    readers["load_model"].add(name)
                if node.func.attr == "restore" and "heckpoint" in ast.unparse(node.func.value):
                    readers["restore"].add(name)
        self.assertEqual(readers, {"load_model": {"psmm_tf/models/presets.py"},
                                   "restore": {"psmm_tf/checkpoints.py"}})


# The one module that reads the native switch and the loader's answer.
NATIVE_DECIDER = "psmm_tf.native"
NATIVE_LOADER = "psmm_tf.native.build"
# Entry points (flags and the environment are theirs) and psmm_tf/__init__.py, which reads
# TensorFlow's own TF_CPP_MIN_LOG_LEVEL for the command-line programs' log filter.
ENVIRONMENT_READERS = {"psmm_tf", "psmm_tf.trainers.train", "psmm_tf.trainers.evaluate",
                       "psmm_tf.trainers.config_flags",
                       "psmm_tf.export.export_saved_model", "psmm_tf.export.score"}


def reads_environment(tree):
    """Lines of `tree` that read the environment: `os.environ`, `os.getenv`, `environ[...]`."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv", "environb"):
            lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module == "os" and any(
                alias.name in ("environ", "getenv") for alias in node.names):
            lines.append(node.lineno)
    return lines


class NativeSwitchStructureTest(unittest.TestCase):
    def test_one_module_decides_native_or_tensorflow_ops(self):
        # Only psmm_tf.native imports the loader, and only it reads the switch's state
        # (`_settings`, `_scopes`); the kernels' users ask it (`library_for`).
        modules = library_modules()
        importers = {name for name, path in modules.items()
                     if NATIVE_LOADER in imported_modules(name, path, modules)}
        self.assertEqual(importers, {NATIVE_DECIDER})
        readers = set()
        for name, path in modules.items():
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if (isinstance(node, ast.Attribute) and node.attr in ("_settings", "_scopes",
                                                                      "_load")
                        and name != NATIVE_DECIDER):
                    readers.add(name)
        self.assertEqual(readers, set())

    def test_the_native_room_imports_no_higher_room(self):
        modules = library_modules()
        for name in (NATIVE_DECIDER, NATIVE_LOADER):
            targets = imported_modules(name, modules[name], modules)
            self.assertLessEqual(targets, {NATIVE_DECIDER, NATIVE_LOADER}, name)

    def test_no_library_module_reads_the_environment(self):
        found = {}
        for name, path in library_modules().items():
            lines = reads_environment(ast.parse(path.read_text(encoding="utf-8")))
            if lines and name not in ENVIRONMENT_READERS:
                found[name] = lines
        self.assertEqual(found, {})
        self.assertTrue(reads_environment(ast.parse("import os\nos.environ.get('X')")))
        self.assertTrue(reads_environment(ast.parse("from os import getenv")))


def uses_tf_function(tree):
    """Lines of `tree` that name `tf.function` (a call or a decorator) or import `function`
    from tensorflow."""
    return [node.lineno for node in ast.walk(tree)
            if (isinstance(node, ast.Attribute) and node.attr == "function"
                and isinstance(node.value, ast.Name) and node.value.id in ("tf", "tensorflow"))
            or (isinstance(node, ast.ImportFrom) and node.module == "tensorflow"
                and any(alias.name == "function" for alias in node.names))]


class GraphFunctionStructureTest(unittest.TestCase):
    def test_the_package_makes_its_graphs_with_graph_function_only(self):
        # psmm_tf.compiled.graph_function: one place that says how the package's code is traced
        # (without AutoGraph, docs/design_notes.md).
        found = {name: lines for name, path in library_modules().items()
                 if name != "psmm_tf.compiled"
                 and (lines := uses_tf_function(ast.parse(path.read_text(encoding="utf-8"))))}
        self.assertEqual(found, {})
        self.assertTrue(uses_tf_function(ast.parse("@tf.function\ndef f(): pass")))
        self.assertTrue(uses_tf_function(ast.parse("from tensorflow import function")))


if __name__ == "__main__":
    unittest.main()
