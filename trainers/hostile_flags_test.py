"""Hostile inputs (docs/hostile_inputs.md, "psmm-train flags"): psmm-train and psmm-evaluate refuse
bad flags, data folders and backends before writing anything. Each is refused with a message naming
it, and nothing a user has is touched (every pre-existing file byte-identical afterwards)."""

from pathlib import Path

import tensorflow as tf

from psmm_tf import testing as psmm_testing  # its TrainedRunTestCase: no tests of its own
from psmm_tf.evaluation import trained_run
from psmm_tf.testing import run_script, snapshot, tiny_config, train_in_process, write_text_corpus
from psmm_tf.training import run_setup, train_lib


class DataDirTest(psmm_testing.TrainedRunTestCase):
    def test_train_data_dir_without_dataset_is_refused_before_anything_is_written(self):
        data = write_text_corpus(Path(self.get_temp_dir()) / "user_corpus")
        other_run = self.copy_run("other_run")
        for data_dir, args, message in [
            (data, [], r"--data_dir=.*user_corpus is refused: --dataset is not given"),
            (data, ["--dataset=synthetic"], r"--data_dir=.* is refused: --dataset=synthetic"),
            (other_run, [], r"--data_dir=.*other_run is refused: --dataset is not given"),
        ]:
            with self.subTest(data_dir=data_dir, args=args):
                before = snapshot(data_dir)
                workdir = Path(self.get_temp_dir()) / "never"
                code, stderr = train_in_process([f"--workdir={workdir}",
                                                  f"--data_dir={data_dir}", *args])
                self.assertNotEqual(code, 0)
                self.assertRegex(stderr, message)
                if not args:
                    self.assertIn("--dataset=ptb|wikitext2|wikitext103|text", stderr)
                self.assertEqual(snapshot(data_dir), before)
                self.assertFalse(workdir.exists())

    def test_synthetic_corpus_is_never_written_into_a_data_dir(self):
        data = write_text_corpus(Path(self.get_temp_dir()) / "user_corpus2")
        before = snapshot(data)
        config = tiny_config().replace(data={"data_dir": str(data)})
        workdir = Path(self.get_temp_dir()) / "lib_run"
        with self.assertRaisesRegex(run_setup.RunRefusedError,
                                    r"data_dir=.*user_corpus2 was given with dataset='synthetic'"):
            train_lib.run(config, workdir, verbose=0)
        self.assertEqual(snapshot(data), before)
        self.assertFalse(workdir.exists())

    def test_evaluate_data_dir_on_a_synthetic_run_writes_nothing(self):
        data = write_text_corpus(Path(self.get_temp_dir()) / "user_corpus3")
        (data / "train.txt.gz").unlink()  # the case that made the generator write there
        run = self.copy_run("eval_run")
        before, run_before = snapshot(data), snapshot(run)
        with self.assertRaisesRegex(trained_run.RunLoadError,
                                    r"data_dir=.*user_corpus3: the run .* synthetic corpus"):
            trained_run.load_trained_run(run, data_dir=data)
        done = run_script("trainers/evaluate.py", [f"--workdir={run}", f"--data_dir={data}"])
        self.assertNotEqual(done.returncode, 0)
        self.assertRegex(done.stderr, r"FATAL data_dir=.*user_corpus3")
        self.assertNotIn("Traceback", done.stderr)
        self.assertEqual(snapshot(data), before)
        self.assertEqual(snapshot(run), run_before)


class OtherBackendTest(psmm_testing.TrainedRunTestCase):
    def test_the_programs_refuse_a_jax_backend_up_front(self):
        # `KERAS_BACKEND=jax psmm-train` ended in a TensorFlow Checkpoint traceback.
        workdir = self.copy_run("jax_backend")
        before = snapshot(workdir)
        root = Path(self.get_temp_dir())
        argvs = {
            "psmm-train": ["--preset=tiny", "--dataset=synthetic",
                           f"--workdir={root / 'jax_new_run'}"],
            "psmm-evaluate": [f"--workdir={workdir}"],
            "psmm-export": [f"--workdir={workdir}", f"--export_base={root / 'jax_export'}"],
        }
        # psmm-train's and psmm-export's mains in one JAX child (one interpreter start; their
        # flags share no registry), psmm-evaluate's (whose flags share psmm-train's) in its own.
        results = psmm_testing.mains_in_one_process(
            ["psmm_tf.trainers.train", "psmm_tf.export.export_saved_model"],
            [["psmm-train", *argvs["psmm-train"]], ["psmm-export", *argvs["psmm-export"]]],
            process_env={"KERAS_BACKEND": "jax"})
        done = run_script("trainers/evaluate.py", argvs["psmm-evaluate"],
                          env={"KERAS_BACKEND": "jax"})
        results.insert(1, (done.returncode, done.stderr))
        for program, (code, stderr) in zip(argvs, results, strict=True):
            with self.subTest(program=program):
                self.assertEqual(code, 1, stderr[-2000:])
                self.assertIn(f"FATAL {program} runs on Keras' TensorFlow backend", stderr)
                self.assertIn("the Keras backend is 'jax' (KERAS_BACKEND)", stderr)
        self.assertEqual(snapshot(workdir), before)
        self.assertFalse((root / "jax_new_run").exists())
        self.assertFalse((root / "jax_export").exists())


class FlagSweepTest(tf.test.TestCase):
    def test_bad_flag_values_and_combinations_are_refused_writing_nothing(self):
        root = Path(self.get_temp_dir())
        corpus = write_text_corpus(root / "flag_corpus")
        before = snapshot(corpus)
        workdir = root / "flag_run"
        for args, message in [
            (["--batch_size=0"], r"flag --batch_size=0: must be an integer >= 1"),
            (["--batch_size=abc"], r"flag --batch_size=abc: invalid literal"),
            (["--dropout=1.5"], r"flag --dropout=1.5: must be a probability in \[0, 1\)"),
            (["--learning_rate=nan"], r"flag --learning_rate=nan: must be a finite number > 0"),
            (["--clip_norm=inf"], r"flag --clip_norm=inf: must be a finite number > 0"),
            (["--pointer_clip_norm=inf"], r"flag --pointer_clip_norm=inf: must be a finite"),
            (["--seed=-1"], r"flag --seed=-1: must be an integer in \[0, 2\*\*32\)"),
            (["--preset=huge"], r"flag --preset=huge: value should be one of"),
            (["--window_size=4", "--context_length=9", "--pointer_memory=recompute"],
             r"--context_length=9 must be < --window_size=4"),
            (["--gate_embedding_dim=5"], r"--gate_embedding_dim is only used with "
                                         r"--input_output_gate_on"),
            (["--max_vocab_size=5"], r"--max_vocab_size cannot be used with --dataset=synthetic"),
            (["--dataset=text", f"--data_dir={corpus}", "--max_vocab_size=2"],
             r"max_vocab_size must be >= 3 \(<unk>, <eos> and at least one word\), got 2"),
            (["--dataset=text", f"--data_dir={corpus}", "--synthetic_train_tokens=100"],
             r"--synthetic_train_tokens is only used with --dataset=synthetic"),
            (["--dataset=ptb"], r"--data_dir is required for --dataset=ptb"),
            (["--strategy=multi_worker"], r"--strategy=multi_worker needs the cluster in "
                                          r"TF_CONFIG"),
            (["stray_argument"], r"Unexpected arguments: stray_argument"),
            ([f"--input_output_gate_on={root / 'no_run'}"],
             r"--input_output_gate_on=.*no_run: .*no_run has no config.json"),
            ([f"--input_output_gate_on={corpus}", "--model=lstm"],
             r"--model cannot be combined with it"),
        ]:
            with self.subTest(args=args):
                # psmm-train's own main, in this process: a new process per case cost ~6 s of
                # TensorFlow start each; the first case also runs as the program.
                code, stderr = train_in_process([f"--workdir={workdir}", *args])
                self.assertEqual(code, 1)
                self.assertRegex(stderr, message)
                self.assertFalse(workdir.exists())
        done = run_script("trainers/train.py", [f"--workdir={workdir}", "--batch_size=0"])
        self.assertEqual(done.returncode, 1)
        self.assertRegex(done.stderr, r"flag --batch_size=0: must be an integer >= 1")
        self.assertNotIn("Traceback", done.stderr)
        self.assertFalse(workdir.exists())
        self.assertEqual(snapshot(corpus), before)

    def test_flags_the_run_would_not_read_and_edge_values_are_refused_writing_nothing(self):
        root = Path(self.get_temp_dir())
        corpus = write_text_corpus(root / "flag_corpus")
        before = snapshot(corpus)
        # A short run, so that a case no longer refused ends soon (exit 0) instead of training
        # the small preset; the case's own flags come after these and win.
        quick = ["--preset=tiny", "--epochs=1", "--steps_per_epoch=2", "--max_eval_tokens=50",
                 "--verbose=0"]
        for index, (args, message) in enumerate([
            # Flags the model or its training would not read (silent before: exit 0).
            (["--context_length=3"], r"--context_length is only used with --pointer_memory="
                                     r"recompute .*, not --pointer_memory=cache"),
            (["--num_sampled=64"], r"--num_sampled is only used with --softmax=sampled\|cnn, "
                                   r"not --softmax=full"),
            (["--char_cnn_clip_norm=2"], r"--char_cnn_clip_norm is only used with "
                                         r"--input_embedding=chars .*, not --input_embedding=ids"),
            (["--model=lstm", "--pointer_clip_norm=0.5", "--pointer_warmup_steps=10"],
             r"--pointer_clip_norm, --pointer_warmup_steps are settings of a model with a "
             r"pointer \(--model=psmm\|pointer_softmax\), not of --model=lstm, which has none"),
            (["--model=lstm", "--compare_baseline", "--pointer_loss_weight=1"],
             r"--pointer_loss_weight is a setting of a model with a pointer"),
            (["--model=lstm", "--nocalibrate_gate"],
             r"--calibrate_gate is a setting of a model with a sentinel gate \(--model=psmm\), "
             r"not of --model=lstm"),
            (["--model=pointer_softmax", "--calibrate_gate"],
             r"--calibrate_gate is a setting .* not of --model=pointer_softmax"),
            # Raw traceback from rows_per_replica before, after reading data, building the model
            # (mirrored uses the GPUs where there are: their count is the machine's).
            *([(["--strategy=mirrored", "--logical_cpus=2", "--batch_size=3"],
                r"--batch_size=3 is not a multiple of the 2 replicas of --strategy=mirrored "
                r"\(--logical_cpus=2 CPU devices\): every replica owns the same number of "
                r"streams \(batch rows\). Give --batch_size=2 or --batch_size=4")]
              if not tf.config.list_physical_devices("GPU") else []),
            (["--logical_cpus=2"], r"--logical_cpus is only used with --strategy=mirrored "
                                   r".*, not --strategy=default"),
            # TFDS prepared the corpus into --data_dir (exit 0) before.
            (["--dataset=text", f"--data_dir={corpus}", f"--tfds_data_dir={corpus}"],
             r"tfds_data_dir=.*flag_corpus \(--tfds_data_dir\) is data_dir=.*flag_corpus "
             r"\(--data_dir\): the prepared TFDS dataset would be written into the corpus "
             r"folder"),
            (["--dataset=text", f"--data_dir={corpus}", f"--tfds_data_dir={corpus}/tfds"],
             r"tfds_data_dir=.*flag_corpus/tfds \(--tfds_data_dir\) is inside data_dir="),
            # Edge values: a traceback after a trained epoch; a message naming no field.
            (["--max_eval_tokens=1"], r"flag --max_eval_tokens=1: must be an integer >= 2 "
                                      r"\(a word to read and one to predict\)"),
            (["--input_embedding=chars", "--override=model.max_word_length=2"],
             r"max_word_length must be >= 5 \(characters per spelled word"),
            (["--override=data.synthetic_seed=-1"], r"synthetic_seed must be an integer >= 0"),
        ]):
            with self.subTest(args=args):
                workdir = root / f"unused_flag_run_{index}"
                code, stderr = train_in_process([f"--workdir={workdir}", *quick, *args])
                self.assertEqual(code, 1)
                self.assertRegex(stderr, message)
                self.assertFalse(workdir.exists())
                self.assertEqual(snapshot(corpus), before)


class UnusedFlagsOnRunsTest(tf.test.TestCase):
    def test_a_gate_run_refuses_calibrate_gate_and_a_resume_keeps_its_recorded_flags(self):
        from psmm_tf.testing import trained_tiny_run

        root = Path(self.get_temp_dir())
        # The gate run's model is an InputOutputGateLM: no sentinel gate is calibrated.
        base = trained_tiny_run("psmm")
        base_before = snapshot(base)
        gate = root / "gate_run"
        code, stderr = train_in_process([f"--input_output_gate_on={base}", "--calibrate_gate",
                                         "--epochs=1", f"--workdir={gate}"])
        self.assertEqual(code, 1, stderr[-3000:])
        self.assertRegex(stderr, r"--calibrate_gate is not used by an input-to-output gate run")
        self.assertFalse(gate.exists())
        self.assertEqual(snapshot(base), base_before)
        # --compare_baseline records its pointer flags in the LSTM half's config.json too; that
        # half resumed on its own with the same flags is a resume, not a refused flag.
        parent = root / "comparison"
        flags = ["--preset=tiny", "--dataset=synthetic", "--synthetic_train_tokens=3000",
                 "--epochs=1", "--steps_per_epoch=2", "--max_eval_tokens=50", "--verbose=0",
                 "--pointer_loss_weight=1"]
        code, stderr = train_in_process([*flags, "--compare_baseline", f"--workdir={parent}"])
        self.assertEqual(code, 0, stderr[-3000:])
        code, stderr = train_in_process([*flags, "--model=lstm", f"--workdir={parent}/lstm"])
        self.assertEqual(code, 0, stderr[-3000:])
        # A new LSTM run given the pointer's flag is still refused.
        code, stderr = train_in_process([*flags, "--model=lstm", f"--workdir={root}/new_lstm"])
        self.assertEqual(code, 1, stderr[-3000:])
        self.assertRegex(stderr, r"--pointer_loss_weight is a setting of a model with a pointer")


class OutOfMemoryTest(tf.test.TestCase):
    def test_a_model_larger_than_memory_is_one_line_and_writes_nothing(self):
        # `--hidden_dim=100000` ended in a ResourceExhaustedError traceback.
        workdir = Path(self.get_temp_dir()) / "too_large"
        done = run_script("trainers/train.py", [
            "--preset=tiny", "--dataset=synthetic", "--epochs=1", "--hidden_dim=1000000",
            f"--workdir={workdir}"])
        self.assertEqual(done.returncode, 1, done.stderr)
        self.assertRegex(done.stderr, r"FATAL psmm-train: out of memory \(OOM when allocating "
                                      r"tensor with shape\[.*--hidden_dim")
        self.assertNotIn("Traceback", done.stderr)
        self.assertFalse(workdir.exists())


if __name__ == "__main__":
    tf.test.main()
