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
