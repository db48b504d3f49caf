"""StableHLO import: JAX/XLA StableHLO (generic form) -> `comm` collectives + costed compute.

Input: a module as JAX/XLA print it in generic form, parsed with unregistered ops allowed
(`lancet-opt --allow-unregistered-dialect`); `stablehlo.*` and `mhlo.*` spellings both work.

* `all_reduce`, `all_gather`, `reduce_scatter` and `all_to_all` become `comm.allreduce`,
  `comm.allgather`, `comm.reduce_scatter` and `comm.all_to_all`, at the same position, with
  the group from `replica_groups` (the `groups` property; none when the groups are empty,
  i.e. all ranks), the reduction from the reduction region (add -> sum, maximum -> max,
  minimum -> min, multiply -> prod; `or`/`and` on booleans -> max/min; a region of more
  than that one op on its two arguments, or `or`/`and` of wider integers, is an error) and the dimensions
  (`all_gather_dim`, `scatter_dimension`, `split_dimension`/`concat_dimension`). Collectives
  with several operands, or tuple-typed operands/results (`*.tuple` producers,
  `get_tuple_element` users), become one variadic comm op.
* An async pair -- `*.async_start` holding the collective in its region (or naming it with
  `called_computation`, MHLO's form), optional `*.async_update`s, then `*.async_done` --
  becomes ONE comm op at the start's position: the collective launches at the start and its
  results are what the done returned. Async wrappers of anything else stay compute, but
  one whose body (or called computation) holds a collective among other ops is an error.
* Shardy's explicit collectives (`sdy.all_gather`, `sdy.all_reduce`, ...: axis-based, no
  replica groups) are errors: costed as compute they would hide communication.
* MHLO's array all-to-all (N operands, no `split_dimension`: operand i goes to rank i) has
  no comm spelling; it becomes `comp.concat` (axis 0) + `comm.all_to_all` (split 0 concat 0)
  + `comp.split`, exactly equivalent. Both glue ops carry `lancet.time_us = 0.0` and
  `lancet.import_glue`, and the split sits just before the first user of the results, so
  the compute stream does not wait for the exchange any earlier than XLA's order does.
* Every other op stays as it is (compute), in input order, so XLA's own schedule can be
  simulated as given. Every StableHLO/MHLO compute op (also inside fusion, while and
  reduction bodies) gets `lancet.flops` / `lancet.bytes` (f64) for the roofline cost model:
  FLOPs are exact for `dot_general`, `dot` and `convolution`, one per result element for
  other arithmetic, and summed over the body of `mhlo.fusion`; bytes are what the op reads
  and writes (free ops -- constants, bitcasts, reshapes, tuples, sharding markers -- get 0).
  Calls and control flow carry the sum of their bodies (a while loop: one iteration).
* The module gets `lancet.world_size` (the option, else `mhlo.num_partitions` x
  `mhlo.num_replicas`, else the ranks the replica groups span) unless it already has one.

Layout: `lowering` (one collective -> comm IR), `patterns` (the conversions as xDSL
`RewritePattern`s), `driver` (`import_stablehlo`, world size, cost annotations, `graph_block`);
the FLOP/byte formulas live beside the roofline model in `lancet_mlir.cost.hlo_costs`.
A collective without `replica_groups` and communication ops with no comm spelling
(`collective_permute`, `collective_broadcast`, `send`, `recv`) are errors, never compute.
Failures raise `UserError` naming the HLO op; the `import-stablehlo` pass reports them as
`PassFailedException` (so `--verify-diagnostics` shows them).
"""

from lancet_mlir.cost.hlo_costs import hlo_kind
from lancet_mlir.importers.stablehlo.driver import (
    ImportSummary,
    graph_block,
    import_stablehlo,
)
from lancet_mlir.importers.stablehlo.patterns import (
    ConvertAsyncCollective,
    ConvertCollective,
)

__all__ = [
    "ConvertAsyncCollective",
    "ConvertCollective",
    "ImportSummary",
    "graph_block",
    "hlo_kind",
    "import_stablehlo",
]
