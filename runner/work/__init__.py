"""The work an ideal kernel cannot avoid, counted on the reference (docs/roofline.md).

- ``maps``: index maps from a tensor's coordinates to input positions, and their distinct runs;
- ``lineage``: what every tensor depends on, writes into storages, the touched-bytes summary;
- ``rules``: how each aten operation moves lineage; ``zeros``: known-zero places (masks);
- ``flops``: FLOPs per operation (matmuls, attention pairs, the elementwise table);
- ``classes``: FLOP classes, their units and the roofline floor;
- ``counter``: the modes around a reference call; ``hybrid``: GPU-sized shapes on a CPU;
- ``audit``: counting in a child process (`atrex roofline`).
"""
