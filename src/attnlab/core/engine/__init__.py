"""The tile engine: exact attention and its statistics one ``(block_q, block_k)`` tile at a time,
in memory linear in the sequence length.

One walk, two implementations of it, and the modifiers it understands::

    tiles.py        the walk itself: tile sizes, which key blocks a query block visits (a band
                    skips the rest), Tiles (a tile's scaled, capped, modified, biased and masked
                    scores in log2 units), split_lse, the pooled cells
    eager/          the reference, in PyTorch operations: every call can run here
      loop.py       forward (online softmax, merge_split) and backward (tiles recomputed from lse)
      stats.py      the census's statistics passes over the same tiles
    compiled/       the fast path: the same loop in C++ (torch's sgemm, at::parallel_for)
      loop.py       build, load and call it; which calls it takes (ATTNLAB_LOOP)
      loop.cpp      forward, backward, the forward with the row statistics, the picked rows
      stats.py      the statistics passes on it
    modifiers/      score_mod and mask functions the loops take beyond plain scores
      diagonal.py   functions of q_idx - kv_idx: one value per diagonal, a mask as a band
      fused.py      any other score_mod and a softcap: one inductor-compiled pass per tile

The public faces are the ``tiled`` and ``blocksparse`` backends (:mod:`attnlab.core.backends`)
and :func:`attnlab.core.stats.attention_stats`; outside :mod:`attnlab.core`, only ring
attention's backward (:func:`~attnlab.core.engine.eager.loop.block_backward`) and the token
relevance of :mod:`attnlab.inspect.importance`
(:func:`~attnlab.core.engine.eager.loop.collect_relevance`) call the engine itself. The engine
imports nothing above it: no backend, no registry, no statistics' face, and the eager loop nothing
of the compiled one. Every compiled path is tested against its eager twin, and both against the
float64 reference backend.
"""
