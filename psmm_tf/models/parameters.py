"""Parameter counts: the paper's arithmetic, to check a built model against."""

from psmm_tf.data.spelling import NUM_CHARACTER_IDS
from psmm_tf.layers.char_cnn import DEFAULT_FILTERS


def lstm_lm_parameter_count(vocab_size, embedding_dim, hidden_dim, num_layers):
    """Weights of the softmax LSTM LM: embedding, LSTM stack (one bias per gate), softmax."""
    embedding = vocab_size * embedding_dim
    lstm = 0
    input_dim = embedding_dim
    for _ in range(num_layers):
        lstm += 4 * hidden_dim * (input_dim + hidden_dim + 1)
        input_dim = hidden_dim
    softmax = hidden_dim * vocab_size + vocab_size
    return embedding + lstm + softmax


def char_cnn_parameter_count(output_dim, char_embedding_dim=16, filters=DEFAULT_FILTERS,
                             num_character_ids=NUM_CHARACTER_IDS):
    """Weights of a `CharacterCNN` with its default sizes: character table, convolutions,
    highway (transform and gate) and the projection to `output_dim` (no bias)."""
    width = sum(count for _, count in filters)
    count = num_character_ids * char_embedding_dim
    count += sum(w * char_embedding_dim * c + c for w, c in filters)
    count += 2 * (width * width + width)
    return count + width * output_dim


def cnn_softmax_parameter_count(vocab_size, hidden_dim, correction_dim=128):
    """Weights of `CNNSoftmax` with its default sizes: the part that replaces `D x V + V`."""
    count = char_cnn_parameter_count(hidden_dim)
    count += vocab_size * correction_dim + correction_dim * hidden_dim
    return count + vocab_size  # per-word bias


def pointer_parameter_count(hidden_dim):
    """The pointer's only new weights: query kernel W (D x D), query bias b and sentinel s."""
    return hidden_dim * hidden_dim + 2 * hidden_dim


def expected_parameter_count(model_config):
    """Trainable parameters a `ModelConfig` builds: the LSTM LM plus the task's head (for PSMM
    the pointer's `H^2 + 2H`; each task class's `head_parameter_count`).

    The tables of word spellings (CNN softmax, character inputs) are constants, not counted.
    """
    from psmm_tf.models.registry import model_class  # local: the task classes import this

    count = lstm_lm_parameter_count(model_config.vocab_size, model_config.embedding_dim,
                                    model_config.hidden_dim, model_config.num_layers)
    if model_config.softmax == "cnn":
        count -= model_config.hidden_dim * model_config.vocab_size + model_config.vocab_size
        count += cnn_softmax_parameter_count(model_config.vocab_size, model_config.hidden_dim)
    if model_config.input_embedding == "chars":
        count -= model_config.vocab_size * model_config.embedding_dim
        count += char_cnn_parameter_count(model_config.embedding_dim)
    return count + model_class(model_config.kind).head_parameter_count(model_config)


def parameter_table(vocab_size, presets=("tiny", "small", "medium", "large")):
    """Rows `(preset, lstm_count, psmm_count, pointer_share)` of the paper's arithmetic."""
    from psmm_tf import configs  # local: configs is a sibling, not a dependency of the math

    rows = []
    for name in presets:
        model = configs.get_preset(name).model
        lstm = lstm_lm_parameter_count(vocab_size, model.embedding_dim, model.hidden_dim,
                                       model.num_layers)
        pointer = pointer_parameter_count(model.hidden_dim)
        rows.append((name, lstm, lstm + pointer, pointer / lstm))
    return rows
