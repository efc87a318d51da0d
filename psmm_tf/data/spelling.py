"""How each token of a corpus is spelled, for models that read words from their characters.

A word-level corpus holds ids: a word outside the vocabulary becomes `<unk>`. A model with
character-CNN inputs (`input_embedding="chars"`) can read that word from its spelling instead,
so the corpus keeps, beside the ids, a `Spelling`: per token an index into a table of spelled
words, the vocabulary's `V` words first and then the corpus's words outside it.
"""

import dataclasses

import numpy as np

# Character ids: 0 padding, 1 begin of word, 2 end of word, 3 + b for UTF-8 byte b.
_PAD, _BEGIN, _END, _BYTE_OFFSET = 0, 1, 2, 3
NUM_CHARACTER_IDS = _BYTE_OFFSET + 256


def word_characters(words, max_word_length):
    """Character-id matrix `(len(words), max_word_length)` of words spelled as UTF-8 bytes.

    Each row is `[begin, bytes..., end, pad...]`; longer words keep their first bytes.
    """
    rows = np.zeros((len(words), max_word_length), np.int32)
    for i, word in enumerate(words):
        ids = [_BEGIN] + [_BYTE_OFFSET + b for b in word.encode("utf-8")][:max_word_length - 2]
        ids.append(_END)
        rows[i, :len(ids)] = ids
    return rows


@dataclasses.dataclass(frozen=True)
class Spelling:
    """The spelling of each token of one split.

    Attributes:
        ids: int32 `(num_tokens,)`: token `i` is spelled as row `ids[i]` of `table`.
        table: int32 `(V + U, max_word_length)`: `word_characters` rows of the vocabulary's
            words (row = the word's id) followed by the `U` words outside it.
    """

    ids: np.ndarray
    table: np.ndarray

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, index):
        """The spelling of a slice of the tokens (`spelling[:max_tokens]`)."""
        if not isinstance(index, slice):
            raise TypeError("a Spelling is sliced (spelling[a:b]), not indexed.")
        return Spelling(self.ids[index], self.table)

    def characters(self, positions):
        """Character ids `positions.shape + (max_word_length,)` of the tokens at `positions`."""
        return self.table[self.ids[positions]]


def spell_splits(tokens, vocabulary, max_word_length):
    """`Spelling`s of tokenised splits, sharing one table.

    Args:
        tokens: dict name -> sequence of str (the splits' tokens).
        vocabulary: `Vocabulary`; its words are spelled at their ids.
        max_word_length: int. Characters kept per word, markers included.

    Returns:
        dict name -> `Spelling`. Words outside the vocabulary are numbered `V, V + 1, ...` in
        order of first appearance (splits in the order of `tokens`).
    """
    index = {word: i for i, word in enumerate(vocabulary.tokens)}
    unknown = []
    ids = {}
    for name, split in tokens.items():
        row = np.empty(len(split), np.int32)
        for i, word in enumerate(split):
            position = index.get(word)
            if position is None:
                position = index[word] = len(index)
                unknown.append(word)
            row[i] = position
        ids[name] = row
    table = word_characters(list(vocabulary.tokens) + unknown, max_word_length)
    return {name: Spelling(row, table) for name, row in ids.items()}
