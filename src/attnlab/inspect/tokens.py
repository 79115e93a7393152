"""Tokens as a reader reads them: byte-level BPE tokens decoded for display."""

from __future__ import annotations


def _byte_alphabet() -> dict[str, int]:
    """Byte-level BPE's alphabet (GPT-2, BART, RoBERTa, Qwen, Llama 3): each byte is one
    printable character, the printable Latin-1 bytes as themselves and the rest (control
    bytes, space, ...) shifted to U+0100 and up in byte order. Character -> byte."""
    kept = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    chars, shift = {}, 0
    for b in range(256):
        if b in kept:
            chars[chr(b)] = b
        else:
            chars[chr(256 + shift)] = b
            shift += 1
    return chars


def display_tokens(tok, tokens: list[str]) -> list[str]:
    """``tokens`` as text: a byte-level BPE token (``"Ġthe"``, ``"æ³"``) becomes the bytes it
    stands for, decoded as UTF-8 (``" the"``, and for a character split over two tokens its
    bytes as ``\\xNN``); other tokenizers' tokens are returned as they are."""
    try:
        byte_level = type(tok.backend_tokenizer.decoder).__name__ == "ByteLevel"
    except AttributeError:                   # a slow tokenizer, or attnlab's own
        byte_level = getattr(tok, "byte_encoder", None) is not None
    if not byte_level:
        return tokens
    alphabet = _byte_alphabet()
    out = []
    for t in tokens:
        if t and all(c in alphabet for c in t):
            out.append(bytes(alphabet[c] for c in t).decode("utf-8", errors="backslashreplace"))
        else:
            out.append(t)                    # special tokens (<|endoftext|>) and the like
    return out


# Punctuation that follows a word without a space, and brackets after which the next word
# follows without one (as transformers' clean_up_tokenization and a reader write them).
_CLOSES = set(".,;:!?%)]}'\u2019\u201d") | {"'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "n't"}
_OPENS = set("([{\u2018\u201c$#")
_AFTER_APOSTROPHE = {"s", "t", "re", "ve", "m", "ll", "d"}        # Kent ' s -> Kent's


def _decoder_kind(tok) -> str | None:
    """The name of a tokenizer's decoder (``ByteLevel``, ``WordPiece``, ``Metaspace``), for
    transformers' fast tokenizers and attnlab's own, else None."""
    for backend in (getattr(tok, "backend_tokenizer", None), getattr(tok, "_tok", None)):
        decoder = getattr(backend, "decoder", None)
        if decoder is not None:
            return type(decoder).__name__
    return None


def reading_pieces(tok, tokens: list[str]) -> list[str]:
    """Each token as the text it adds when the tokens are read in order, its spacing included,
    so that ``"".join(pieces)`` reads as the text and a report can mark one token inside it.

    Byte-level BPE tokens, as :func:`display_tokens` decodes them, already carry their spaces
    (``" the"``) and a byte tokenizer's tokens are the text's own characters: both are kept.
    SentencePiece's ``"▁"`` is the space it stands for. WordPiece (BERT) drops the spaces:
    a ``"##"`` piece continues the word before it, punctuation closes up to it, a word after an
    opening bracket follows it without one, and so does ``s``, ``t``, ``re`` ... after an
    apostrophe; every other token is a new word after a space.
    Without a tokenizer (``tok=None``), tokens with ``"##"`` pieces are read as WordPiece, with
    ``"▁"`` as SentencePiece, and others as they are."""
    kind = _decoder_kind(tok) if tok is not None else None
    if kind is None:
        kind = ("WordPiece" if any(t.startswith("##") for t in tokens)
                else "Metaspace" if any("\u2581" in t for t in tokens) else "as is")
    if kind == "Metaspace":
        return [t.replace("\u2581", " ") for t in tokens]
    if kind != "WordPiece":
        return list(tokens)
    out = []
    for i, t in enumerate(tokens):
        if t.startswith("##") and len(t) > 2:
            out.append(t[2:])
        elif (i == 0 or t in _CLOSES or tokens[i - 1] in _OPENS
              or (tokens[i - 1] in ("'", "\u2019") and t in _AFTER_APOSTROPHE)):
            out.append(t)
        else:
            out.append(" " + t)
    return out
