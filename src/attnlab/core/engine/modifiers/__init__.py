"""The score modifiers and mask functions the tile loops take beyond plain scores (see
:mod:`attnlab.core.engine`)."""
