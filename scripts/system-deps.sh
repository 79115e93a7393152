#!/usr/bin/env bash
# The system packages the test suite needs, installed when missing; `make test` and `.ci/run`
# both call this one script.
#   chromium        the HTML report and the notebooks' inline reports, in a real headless
#                   browser (playwright drives Debian's chromium; it downloads no browser)
#   pdflatex        `attnlab paper` in English (TeX Live)
#   xelatex + ctex  `attnlab paper` in Chinese
#   pdftoppm        the compiled pages turned into images (poppler)
#   g++             the C++ compiler of attnlab's compiled tile loop (attnlab.core.engine.compiled.loop) and
#                   of torch.compile (inductor), which builds its fused tile modifiers
#                   (attnlab.core.engine.modifiers.fused); without it both run eagerly
#   bible           the King James Bible (bible-kjv, with bible-kjv-text): the kjv model's
#                   held-out text, and its training text (scripts/train_zoo.py kjv)
# Where it cannot install (not root, no apt-get), it stops with one line naming the command.
set -euo pipefail

packages=()
command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 \
  || packages+=(chromium)
command -v pdflatex >/dev/null 2>&1 || packages+=(texlive-latex-base texlive-latex-recommended)
if ! command -v xelatex >/dev/null 2>&1 || ! kpsewhich ctex.sty >/dev/null 2>&1; then
  packages+=(texlive-xetex texlive-lang-chinese)
fi
command -v pdftoppm >/dev/null 2>&1 || packages+=(poppler-utils)
command -v bible >/dev/null 2>&1 || packages+=(bible-kjv)
command -v g++ >/dev/null 2>&1 || packages+=(g++)

if [ ${#packages[@]} -eq 0 ]; then exit 0; fi

sudo=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    sudo=(sudo -n)
  else
    echo "attnlab: the tests need ${packages[*]}; run: sudo apt-get install -y --no-install-recommends ${packages[*]}" >&2
    exit 1
  fi
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "attnlab: the tests need ${packages[*]} and this machine has no apt-get; install their equivalents (chromium, TeX Live with xelatex and ctex, poppler-utils, bible-kjv, g++)" >&2
  exit 1
fi

echo "installing ${packages[*]} (apt-get) ..."
"${sudo[@]}" apt-get update -qq
# chromium takes its recommends (fonts, the sandbox helper); TeX Live without them (gigabytes).
for pkg in "${packages[@]}"; do
  if [ "$pkg" = chromium ]; then
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq chromium >/dev/null
  fi
done
tex=()
for pkg in "${packages[@]}"; do
  if [ "$pkg" != chromium ]; then tex+=("$pkg"); fi
done
if [ ${#tex[@]} -gt 0 ]; then
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends \
    "${tex[@]}" >/dev/null
fi
