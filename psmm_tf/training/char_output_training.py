"""Training and evaluating a character-LSTM output layer on a trained run's frozen model.

Jozefowicz et al. (2016) train the "Char LSTM Predictions" layer on a frozen word-level model:
the word model's hidden state `h_t` (inference mode, LSTM state carried along the corpus as in
training) conditions `CharacterLSTMOutput`, trained with Adam to minimise
`-log p_char(w_{t+1} | h_t)`, the sum of the next word's character log-probabilities, averaged
over the words of an update. Every word is spelled from the corpus, so a word outside the word
model's vocabulary is predicted by its own characters, not as `<unk>`.

Given `h_t`, the words are independent examples (the character LSTM carries nothing from one
word to the next), so an epoch runs the frozen model along the corpus in its training windows
and feeds the character LSTM shuffled updates of `words_per_update` words drawn from a buffer
of `shuffle_words` (`shuffled_word_batches`): more, better mixed updates than one per window
(docs/results.md, "The character-LSTM output layer").

Evaluation (`evaluate_char_output`) scores every token of a split, one stream, windows of
`eval_length` with state and pointer memory carried (psmm-evaluate's setting), and reports over
the same tokens: the word model's closed-vocabulary perplexity (a word outside the vocabulary
counted as `<unk>`, the usual convention), the character LSTM's (every word by its spelling),
and the open-vocabulary mixture's (with a pointer underneath: `g p_char + pointer mass on the
window's words of the same spelling`); then the same three over the words outside the vocabulary
alone and over those inside it.

The run's folder holds char_output.json (`CharOutputConfig`), checkpoints/ (one per finished
epoch: a killed run resumes from its last finished epoch), model.keras (`CharacterOutputLM`,
the best epoch by validation perplexity of the open-vocabulary model), history.json,
steps.jsonl, tensorboard/ and results.json, as a psmm-train run's (`train_lib.drive`).

Example:
```python
# Needs a finished psmm-train run in /runs/ptb_psmm.
from psmm_tf.training.char_output_training import CharOutputConfig, run

results = run(CharOutputConfig(base_workdir="/runs/ptb_psmm", epochs=2), "/runs/ptb_chars")
results["test"]["open_perplexity"], results["test"]["oov"]["open_perplexity"]
```
"""

import dataclasses
import json
import math
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from psmm_tf import gradients
from psmm_tf import workdir as run_files
from psmm_tf.compiled import graph_function
from psmm_tf.configs import check_positive_ints
from psmm_tf.data import corpus_setup
from psmm_tf.data.windows import steps_per_epoch, stream_length
from psmm_tf.evaluation.trained_run import RunLoadError, load_trained_run
from psmm_tf.layers.char_lstm_output import trimmed_spellings
from psmm_tf.models import CharacterOutputLM, read_model_file
from psmm_tf.training import checkpointing, reporting, run_setup, train_lib
from psmm_tf.training.schedule import PlateauSchedule


@dataclasses.dataclass(frozen=True)
class CharOutputConfig:
    """A character-LSTM output layer trained on a run's frozen model."""

    # The trained run (config.json, vocab.txt, model.keras) whose model is frozen underneath.
    base_workdir: str
    # Units of the character LSTM (and width of its conditioning on h_t).
    units: int = 256
    char_embedding_dim: int = 16
    # Characters per spelling, markers included: longer words keep their first bytes.
    max_word_length: int = 32
    # Dropout on h_t in training.
    dropout: float = 0.25
    # Dropout on the character LSTM's inputs and outputs in training, one mask per word.
    char_dropout: float = 0.0
    # Adam's learning rate, halved after an epoch whose validation perplexity is not better.
    # 3e-3 suits 128 shuffled words an update better than 1e-2 (docs/results.md, "Shuffled
    # updates").
    learning_rate: float = 3e-3
    # Global norm limit of the gradient of the mean per-word loss.
    clip_norm: float = 5.0
    epochs: int = 4
    # Words (hidden state and next word) of one update, drawn at random from a buffer of
    # `shuffle_words` words of consecutive windows.
    words_per_update: int = 128
    shuffle_words: int = 200_000
    # None: the base run's batch size and window length T (the windows the frozen model reads).
    batch_size: int | None = None
    num_predicted: int | None = None
    # Updates of `words_per_update` words per epoch at most (None: every word of the training
    # windows once; the windows drop the split's last words that fill no window). A cap still
    # reads a whole buffer before the first update and draws from it.
    steps_per_epoch: int | None = None
    # Evaluate on at most this many tokens of the validation and test splits (None: all).
    max_eval_tokens: int | None = None
    seed: int = 0
    # Where the base run's corpus files are now, if not where it read them.
    data_dir: str | None = None

    def __post_init__(self):
        if not isinstance(self.base_workdir, str) or not self.base_workdir:
            raise ValueError(f"base_workdir must be a trained run's folder, got "
                             f"{self.base_workdir!r}.")
        check_positive_ints(self, ("units", "char_embedding_dim", "epochs", "words_per_update",
                                   "shuffle_words"), optional=("batch_size", "num_predicted",
                                                               "steps_per_epoch",
                                                               "max_eval_tokens"))
        if self.max_eval_tokens is not None and self.max_eval_tokens < 2:
            raise ValueError(f"max_eval_tokens must be >= 2 (a word to read and one to "
                             f"predict), got {self.max_eval_tokens!r}.")
        if not isinstance(self.max_word_length, int) or self.max_word_length < 3:
            raise ValueError(f"max_word_length must be an integer >= 3, got "
                             f"{self.max_word_length!r}.")
        for name in ("dropout", "char_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {getattr(self, name)!r}.")
        for name in ("learning_rate", "clip_norm"):
            if not 0.0 < getattr(self, name) < math.inf:
                raise ValueError(f"{name} must be a finite number > 0, got "
                                 f"{getattr(self, name)!r}.")

    def to_json(self):
        return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text):
        fields = json.loads(text)
        unknown = sorted(set(fields) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise ValueError(f"unexpected field(s) {unknown} in a character-output config.")
        return cls(**fields)


@dataclasses.dataclass
class _Data:
    """A split's ids, each token's spelling row for the base model's character inputs (or
    None) and for the output layer, and the vocabulary size (rows >= it: outside)."""

    ids: np.ndarray
    words: np.ndarray
    input_table: np.ndarray | None
    output_table: np.ndarray
    vocab_size: int


def load_base(config):
    """The base run (`TrainedRun`) and its splits as `_Data`, spelled for the output layer.

    Raises:
        RunLoadError: the base run cannot be loaded (naming what), it is still training (naming
            the pid holding its lock: its model.keras is replaced at every improving
            validation), or it is itself a run that wraps another model.
    """
    base = Path(config.base_workdir)
    run_setup.check_not_training(
        base, "Wait for it to end before training a character output on its model.",
        error=RunLoadError)
    if (base / run_files.CONFIG_FILE).is_file() and not (base / run_files.MODEL_FILE).is_file():
        # A run killed before its first validation: the frozen model is its model.keras only.
        raise RunLoadError(
            f"{base} holds no {run_files.MODEL_FILE} yet (the run's best model, written at its "
            f"first validation: was it stopped before one?). The character output trains on a "
            f"finished run's {run_files.MODEL_FILE}: resume that run (psmm-train "
            f"--workdir={base}) until it has one.")
    run = load_trained_run(config.base_workdir, data_dir=config.data_dir)
    if run.config.model.base_model is not None:
        raise RunLoadError(f"{config.base_workdir} is an input-to-output gate run; train the "
                           f"character output on the run of the model itself.")
    spelled = corpus_setup.load_corpus(
        run.config.data, scratch_dir=Path(config.base_workdir) / run_files.SYNTHETIC_DATA_DIR,
        vocabulary=run.corpus.vocabulary, max_word_length=config.max_word_length)
    splits = {}
    for role, ids in run.corpus.ids.items():
        output = spelled.spellings[role]
        base = run.corpus.spelling(role)
        splits[role] = _Data(ids, output.ids, None if base is None else base.table,
                             output.table, len(run.corpus.vocabulary))
    return run, splits


def build_char_output_model(config, base_model):
    """A `CharacterOutputLM` of `config` on the frozen `base_model`."""
    return CharacterOutputLM(base_model, units=config.units,
                             max_word_length=config.max_word_length,
                             char_embedding_dim=config.char_embedding_dim,
                             dropout=config.dropout, char_dropout=config.char_dropout,
                             seed=config.seed)


def evaluate_char_output(model, data, length=100, max_tokens=None):
    """Per-token scores of a split under the word model, the character LSTM and their mixture.

    One stream (batch 1), windows of `length` inputs, the word model's LSTM state and pointer
    memory carried from window to window; the pointer's keys are the memory's `M` words before
    the window followed by the window's own, matched to a target by spelling.

    Args:
        model: a `CharacterOutputLM`.
        data: `_Data` of the split.
        length: int. Window length.
        max_tokens: optional int. Score the first this many tokens only.

    Returns:
        dict: `tokens`, `oov_tokens`, `oov_rate`; `word_perplexity` (closed vocabulary, a word
        outside it scored as `<unk>`), `char_perplexity`, `open_perplexity` over every token;
        `oov` and `in_vocabulary`: the same three over the targets outside and inside the
        vocabulary (`oov["word_perplexity"]` is `<unk>`'s, a class, not those words').
    """
    base = model.base_model
    count = len(data.ids) if max_tokens is None else min(len(data.ids), max_tokens)
    if count < 2:
        raise ValueError(f"evaluate_char_output needs at least two tokens (a word to read and "
                         f"one to predict), got {count}.")
    memory_size = base.memory_size if model.has_pointer else 0

    @graph_function
    def scored(token_ids, token_mask, targets, target_chars, token_chars, key_words,
               target_words, state, memory):
        scores, outputs = base.score_step(token_ids, targets, token_mask, state, memory,
                                          token_chars=token_chars)
        outputs["word_log_prob"] = model.char_output(outputs["hidden"], target_chars)
        open_log_prob = model.open_vocabulary_log_prob(outputs, key_words, target_words)
        return (scores["log_probs"], outputs["word_log_prob"], open_log_prob,
                outputs["state"], outputs["memory"], outputs.get("key_ids"))

    state, memory = base.zero_state(1), base.empty_memory(1)
    word, char, mixed = [], [], []
    for start in range(0, count - 1, length):
        t = min(length, count - 1 - start)
        inputs = np.arange(start, start + length)
        mask = np.arange(length) < t
        positions = np.where(mask, inputs, start)
        keys = np.arange(start - memory_size, start + length)  # key j's token position
        token_chars = (None if data.input_table is None
                       else data.input_table[data.words[positions]][None])
        outputs = scored(
            data.ids[positions][None], mask[None], data.ids[positions + 1][None],
            trimmed_spellings(data.output_table[data.words[positions + 1]][None]), token_chars,
            data.words[np.clip(keys, 0, count - 1)][None], data.words[positions + 1][None],
            state, memory)
        state, memory = outputs[3], outputs[4]
        if model.has_pointer:
            _check_keys(np.asarray(outputs[5])[0], data, keys, start + t)
        for values, out in zip(outputs[:3], (word, char, mixed), strict=False):
            out.append(np.asarray(values)[0, :t])
    word, char, mixed = (np.concatenate(v) for v in (word, char, mixed))
    outside = data.words[1:count] >= data.vocab_size

    def perplexities(where):
        return {f"{name}_perplexity": float(np.exp(-np.mean(v[where]))) if v[where].size
                else math.nan for name, v in (("word", word), ("char", char), ("open", mixed))}

    return {"tokens": int(count - 1), "oov_tokens": int(outside.sum()),
            "oov_rate": float(outside.mean()), **perplexities(slice(None)),
            "oov": perplexities(outside), "in_vocabulary": perplexities(~outside)}


def _check_keys(key_ids, data, key_positions, end):
    """The pointer's keys (`key_ids`, `(M + length,)`) are the words at `key_positions`, the
    positions the evaluation matches them at, where a key exists (0 <= position < end): a
    word of the vocabulary is its own id (the spelling table's first V rows)."""
    real = (key_positions >= 0) & (key_positions < end)
    words = data.words[np.where(real, key_positions, 0)]
    known = real & (words < data.vocab_size)
    if not np.array_equal(words[known], key_ids[known]):
        raise RuntimeError(f"The pointer's keys before token {end} are not the words at "
                           f"their positions: the memory and the window are out of step.")


def _training_windows(data, batch_size, num_predicted):
    """Batches of B contiguous streams, T inputs each, with the next words' spellings."""
    n = stream_length(len(data.ids), batch_size)  # as psmm-train's streams
    rows = np.arange(batch_size)[:, None] * n
    for start in range(0, n - num_predicted + 1, num_predicted):
        positions = rows + start + np.arange(num_predicted)[None, :]
        token_chars = (None if data.input_table is None
                       else data.input_table[data.words[positions]])
        yield (data.ids[positions], token_chars,
               trimmed_spellings(data.output_table[data.words[positions + 1]]))


def shuffled_word_batches(windows, words_per_update, shuffle_words, rng):
    """Updates of `words_per_update` words drawn at random from a buffer of windows' words.

    Windows are added to the buffer until it holds at least `shuffle_words` words (or the
    windows run out); the buffer is shuffled and cut into updates; the words left over (fewer
    than an update) stay for the next fill. Every word of the windows is in exactly one update;
    the last update may be smaller. Updates are cut as they are consumed: the buffer is held
    once.

    Args:
        windows: iterable of `(hidden, chars)`, float `(N_i, H)` hidden states and int
            `(N_i, W_i)` spellings of the words they predict (widths may differ).
        words_per_update: int. Words of an update.
        shuffle_words: int. Words in the buffer before it is shuffled.
        rng: `np.random.Generator`.

    Yields:
        `(hidden, chars)`: `(words_per_update, H)` and `(words_per_update, W)`, the spellings
        cut to the columns their longest word needs (`trimmed_spellings`).
    """
    hidden, chars = [], []

    def pooled():
        """The buffer's windows as one `(hidden, chars)` pair; the window lists emptied."""
        width = max(c.shape[1] for c in chars)
        pooled_chars = np.concatenate([np.pad(c, ((0, 0), (0, width - c.shape[1])))
                                       for c in chars])
        pooled_hidden = np.concatenate(hidden)
        hidden.clear()
        chars.clear()
        return pooled_hidden, pooled_chars

    def updates(pooled_hidden, pooled_chars, order):
        for start in range(0, len(order), words_per_update):
            rows = order[start:start + words_per_update]
            yield pooled_hidden[rows], trimmed_spellings(pooled_chars[rows])

    held = 0
    for window_hidden, window_chars in windows:
        hidden.append(window_hidden)
        chars.append(window_chars)
        held += len(window_hidden)
        if held >= shuffle_words:
            pooled_hidden, pooled_chars = pooled()
            order = rng.permutation(held)
            whole = held - held % words_per_update
            # The words left over wait for the next fill.
            hidden.append(pooled_hidden[order[whole:]])
            chars.append(pooled_chars[order[whole:]])
            held -= whole
            yield from updates(pooled_hidden, pooled_chars, order[:whole])
    if held:
        pooled_hidden, pooled_chars = pooled()
        yield from updates(pooled_hidden, pooled_chars, rng.permutation(held))


def make_reader(base_model):
    """A compiled `(token_ids, token_chars, state) -> (hidden, state)` of the frozen model
    (inference mode) for `frozen_windows`."""

    @graph_function
    def read(token_ids, token_chars, state):
        outputs = base_model(token_ids, state=state, training=False, token_chars=token_chars)
        return outputs["hidden"], outputs["state"]

    return read


def frozen_windows(read, base_model, data, batch_size, num_predicted):
    """The frozen model along a split in its training windows (B streams, state carried).

    Args:
        read: `make_reader(base_model)`.
        base_model: the frozen `LanguageModel`.
        data: `_Data` of the split.
        batch_size, num_predicted: int. Streams and window length T.

    Yields:
        `(hidden, chars)`: each window's hidden states, float `(B T, H)`, and the spellings of
        the words they predict, int `(B T, W)`.
    """
    state = base_model.zero_state(batch_size)
    for ids, token_chars, target_chars in _training_windows(data, batch_size, num_predicted):
        hidden, state = read(ids, token_chars, state)
        hidden = np.asarray(hidden)
        yield (hidden.reshape(-1, hidden.shape[-1]),
               target_chars.reshape(-1, target_chars.shape[-1]))


def make_train_step(model, optimizer, clip_norm):
    """A compiled update of `model.char_output` (a `CharacterOutputLM`'s) on
    `(hidden (N, H), chars (N, W))`: Adam on the mean `-log p_char(word | h)`, the gradient
    clipped to global norm `clip_norm` as every training step clips (`gradients.clip_gradients`).
    Returns `(loss, gradient norm)`."""
    variables = model.char_output.trainable_variables

    @graph_function(reduce_retracing=True)
    def train_step(hidden, target_chars):
        with tf.GradientTape() as tape:
            log_probs = model.char_output(hidden, target_chars, training=True)
            loss = -tf.reduce_mean(log_probs)
        grads, norm = gradients.clip_gradients(tape.gradient(loss, variables), clip_norm)
        optimizer.apply_gradients(zip(grads, variables, strict=True))
        return loss, norm

    return train_step


def run(config, workdir, verbose=1, restart=False):
    """Trains `config`'s character output layer in `workdir` (resuming a run there), in the
    training engine of every run (`train_lib.drive`).

    `restart` (psmm-train --restart) starts the run again from scratch, as for any run: its
    training outputs (checkpoints, model.keras, history, steps, results, TensorBoard) are moved
    into `workdir/previous_run_<N>/` once the run is validated. Without it, a workdir whose
    trained run has lost its checkpoints is refused (training again would replace its results).

    Returns:
        dict: `epochs`, `best_epoch`, `valid` and `test` (`evaluate_char_output` of the best
        epoch's model), `train_seconds` (the epochs' training, summed over history.json's
        records, without validation). Also written to `workdir/results.json`.

    Raises:
        RunLoadError: the base run cannot be loaded, or it is still training.
        run_setup.RunRefusedError: `workdir` holds a run of another config, a trained run
            without checkpoints (without `restart`), or an entry of the wrong kind (e.g. a
            file `checkpoints`); nothing is written there then.
        train_lib.NonFiniteLossError: the loss became NaN or infinite (the last checkpoint is
            kept).
    """
    workdir = Path(workdir)
    return train_lib.drive(lambda: _CharOutputRun(config, workdir, verbose, restart), workdir)


class _CharOutputRun:
    """A character-output run as `train_lib.drive` runs it: its own data (the frozen model's
    hidden states in shuffled updates), step and evaluation; the shared schedule (the learning
    rate halved after an epoch that is not the best so far, a fixed number of epochs),
    checkpoint keys (one checkpoint per finished epoch) and reports (steps.jsonl, TensorBoard,
    history.json)."""

    def __init__(self, config, workdir, verbose, restart=False):
        self.config, self.workdir = config, workdir
        config_path = _check_workdir(config, workdir, restart)
        base_run, self.splits = load_base(config)
        base_config = base_run.config
        self.batch_size = config.batch_size or base_config.train.batch_size
        self.num_predicted = config.num_predicted or base_config.train.num_predicted
        if steps_per_epoch(len(self.splits["train"].ids), self.batch_size,
                           self.num_predicted) < 1:
            raise run_setup.RunRefusedError(
                f"The training split of {config.base_workdir} ({len(self.splits['train'].ids)} "
                f"tokens) holds no window of batch_size x num_predicted = {self.batch_size} x "
                f"{self.num_predicted} tokens; give a smaller --batch_size or --num_predicted.")
        if restart:  # validated: nothing is moved for a refused start
            run_files.move_training_outputs(workdir)
        self.eval_length = base_config.train.eval_length
        self.same_valid_and_test = base_config.data.test_split == base_config.data.valid_split
        keras.utils.set_random_seed(config.seed)
        self.model = build_char_output_model(config, base_run.model)
        self.optimizer = keras.optimizers.Adam(config.learning_rate)
        self.optimizer.build(self.model.char_output.trainable_variables)
        self.schedule = PlateauSchedule(config.learning_rate, 0.5, config.epochs, config.epochs,
                                        decay_unless_best=True)
        self.progress = checkpointing.Progress()
        # The dropout's random state too: a resumed run draws the masks an unbroken one would.
        checkpoint = checkpointing.make_checkpoint(self.model.char_output, self.optimizer,
                                                   self.schedule, self.progress)
        self.manager = checkpointing.make_manager(checkpoint,
                                                  workdir / run_files.CHECKPOINT_DIR, 2)
        self.history = self._restore(checkpoint)
        run_files.write_text_atomic(config_path, config.to_json())
        self.train_step = make_train_step(self.model, self.optimizer, config.clip_norm)
        self.read = make_reader(self.model.base_model)
        self.reporter = reporting.Reporter(workdir, verbose=verbose)
        self.reporter.drop_steps_after(self.progress.get()[2])

    def _restore(self, checkpoint):
        """Restores the latest checkpoint, if any; returns the finished epochs' records.

        Checkpoints written before the shared keys hold the layer, Adam and the finished epochs
        under `char_output`, `optimizer` and `epoch`: the schedule's state is then its rule
        replayed over the finished epochs' validation perplexities."""
        directory = self.workdir / run_files.CHECKPOINT_DIR
        old = tf.train.Checkpoint(char_output=self.model.char_output, optimizer=self.optimizer,
                                  epoch=self.progress.epoch)
        try:
            path, old_format = checkpointing.restore_latest(checkpoint, directory), False
        except AssertionError as err:
            try:
                path, old_format = checkpointing.restore_latest(old, directory), True
            except AssertionError:
                raise run_setup.RunRefusedError(
                    f"The checkpoints of {self.workdir} hold another model ({err}); nothing "
                    f"was changed there: use another workdir.") from None
        # The best model cannot be told without the finished epochs' records.
        history = run_setup.finished_history(
            self.workdir, self.progress.get()[0], path, first_epoch=1,
            remedy="train the output layer again in another workdir")
        for record in history if old_format else ():  # the schedule's rule replayed
            self.schedule.update(record["valid"]["open_perplexity"])
        # The epochs may grow on a resume: the schedule's counters come from the file.
        self.schedule.max_epochs = self.schedule.patience = self.config.epochs
        return history

    def train_epoch(self):
        """Trains one epoch; returns its `EpochMeter` (the mean loss per word)."""
        config = self.config
        epoch, _, global_step = self.progress.get()
        # A resumed run shuffles each epoch as an unbroken one does.
        rng = np.random.default_rng([config.seed, epoch])
        meter = reporting.EpochMeter()
        lr = float(self.schedule.learning_rate.numpy())
        self.optimizer.learning_rate = lr
        self.reporter.start_epoch(epoch, config.steps_per_epoch, 0)
        windows = frozen_windows(self.read, self.model.base_model, self.splits["train"],
                                 self.batch_size, self.num_predicted)
        for step, (hidden, target_chars) in enumerate(shuffled_word_batches(
                windows, config.words_per_update, config.shuffle_words, rng)):
            if config.steps_per_epoch is not None and step >= config.steps_per_epoch:
                break
            loss, norm = self.train_step(hidden, target_chars)
            if not math.isfinite(float(loss)):
                raise train_lib.NonFiniteLossError(
                    f"The character output's loss is {float(loss)} at step {step}; the last "
                    f"checkpoint is kept.")
            # The sums `EpochMeter` takes, of a step with no pointer (gate 1 on every word).
            words = float(len(hidden))
            metrics = {"loss": float(loss) * words, "nll": float(loss) * words,
                       "pointer_loss": 0.0, "gate": words, "weight": words, "grad_norm": norm}
            meter.add(metrics)
            global_step += 1
            self.reporter.step(epoch, step, global_step, metrics, meter, lr)
        self.progress.set(epoch, 0, global_step)
        return meter

    def end_epoch(self, meter):
        """Validates and applies the schedule; records the epoch, then saves the best model,
        then the checkpoint that counts the epoch as done: a run killed in between repeats the
        epoch, its history cut back to the checkpoint's epochs."""
        valid = self.evaluate("valid")
        epoch, _, global_step = self.progress.get()
        lr = float(self.schedule.learning_rate.numpy())
        decision = self.schedule.update(valid["open_perplexity"])
        summary = meter.summary()
        train_perplexity = summary["perplexity"]
        record = {"epoch": epoch + 1, "train_word_perplexity": train_perplexity,
                  "learning_rate": lr, "valid": valid, "train_seconds": summary["seconds"]}
        self.history.append(record)
        self.reporter.end_epoch(record, (
            f"char output epoch {epoch + 1}: train word perplexity {train_perplexity:.2f}, "
            f"valid {valid['open_perplexity']:.2f} (oov {valid['oov']['open_perplexity']:.2f})"))
        self.reporter.train_scalars(global_step, meter, lr)
        self.reporter.validation_scalars(global_step, valid["open_perplexity"])
        if decision.improved:
            run_files.save_model_atomic(self.model, self.workdir / run_files.MODEL_FILE)
        self.progress.set(epoch + 1, 0, global_step)
        self.manager.save(checkpoint_number=epoch + 1)

    def finish(self):
        """Evaluates the best epoch's model on the test split; writes results.json."""
        best = min(self.history, key=lambda r: r["valid"]["open_perplexity"])
        saved = read_model_file(self.workdir / run_files.MODEL_FILE, error=RunLoadError)
        self.model.char_output.set_weights(saved.char_output.get_weights())
        # The epochs' training seconds, as a language model's run sums them (0.2.0's records
        # have none).
        train_seconds = sum(record.get("train_seconds", 0.0) for record in self.history)
        results = {"epochs": len(self.history), "best_epoch": best["epoch"],
                   "valid": best["valid"], "train_seconds": train_seconds}
        if "test" in self.splits and self.same_valid_and_test:
            results["test"] = best["valid"]  # the same text (e.g. WikiText-2's test file as both)
        elif "test" in self.splits:
            results["test"] = self.evaluate("test")
        run_files.write_json_atomic(self.workdir / run_files.RESULTS_FILE, results)
        return results

    def evaluate(self, role):
        """`evaluate_char_output` of the model on split `role` as psmm-evaluate scores it."""
        return evaluate_char_output(self.model, self.splits[role], self.eval_length,
                                    self.config.max_eval_tokens)


def _check_workdir(config, workdir, restart=False):
    """Refuses a workdir holding a training run, a character-output run of another config
    (its epochs may grow and its corpus may have moved), or one a run could not resume
    (`run_setup.check_resumable`: a file `checkpoints`, or without `restart` a trained run
    without checkpoints); returns the config file's path.

    Raises:
        run_setup.RunRefusedError: naming the file; nothing is written.
    """
    if (workdir / run_files.CONFIG_FILE).exists():
        raise run_setup.RunRefusedError(
            f"{workdir} holds a training run ({run_files.CONFIG_FILE}); a character-output run "
            f"needs a folder of its own (its base run is only read).")
    run_setup.check_workdir_holds(workdir, "char_output")  # a --compare_baseline folder
    run_setup.check_resumable(workdir, restart)
    config_path = workdir / run_files.CHAR_OUTPUT_CONFIG_FILE
    if config_path.is_file():
        try:
            stored = CharOutputConfig.from_json(config_path.read_text(encoding="utf-8"))
        except (ValueError, TypeError, UnicodeDecodeError) as err:
            raise run_setup.RunRefusedError(
                f"{config_path} is not a character-output config ({type(err).__name__}: "
                f"{err}); nothing was changed in {workdir}.") from None
        if dataclasses.replace(stored, epochs=config.epochs, data_dir=config.data_dir) != config:
            raise run_setup.RunRefusedError(
                f"{workdir} holds a character-output run of another config ({config_path}); "
                f"resume it with its own settings (epochs may grow) or use another workdir.")
    return config_path


def format_results(results):
    """Lines of a finished run's numbers (`run`'s results), for psmm-train."""
    lines = [f"character output: {results['epochs']} epochs, best {results['best_epoch']}"]
    for split in ("valid", "test"):
        if split not in results:
            continue
        r = results[split]
        lines.append(
            f"{split}: {r['tokens']} tokens, {r['oov_tokens']} outside the vocabulary "
            f"({100 * r['oov_rate']:.2f}%); perplexity word model {r['word_perplexity']:.2f} "
            f"(outside words as <unk>), character LSTM {r['char_perplexity']:.2f}, open "
            f"vocabulary {r['open_perplexity']:.2f}; outside words alone: character LSTM "
            f"{r['oov']['char_perplexity']:.2f}, open vocabulary "
            f"{r['oov']['open_perplexity']:.2f}")
    return "\n".join(lines)
