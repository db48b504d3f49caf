"""Lower a data-parallel MLP training step with JAX (Shardy, shard_map) to generic MLIR.

Run once with JAX installed (not at test time): `python make_dp_mlp.py OUT_DIR` writes
`dp_mlp.stablehlo.generic.mlir`. Four host devices form one data-parallel axis `dp`; each
rank runs a 3-layer MLP forward and backward on its shard of the batch and averages the six
gradients with `pmean` (six `stablehlo.all_reduce` ops inside `sdy.manual_computation`).
"""

import os
import sys
from functools import partial

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

N, B, D, H = 4, 16, 64, 256  # devices, batch per device, model dim, hidden dim


def loss_fn(p: dict, x: jax.Array, y: jax.Array) -> jax.Array:
    h = jax.nn.relu(x @ p["w1"] + p["b1"])
    h = jax.nn.relu(h @ p["w2"] + p["b2"])
    out = h @ p["w3"] + p["b3"]
    return jnp.mean((out - y) ** 2)


def main(out_dir: str) -> None:
    mesh = jax.make_mesh((N,), ("dp",))
    spec = {k: P() for k in ("w1", "b1", "w2", "b2", "w3", "b3")}

    @partial(
        jax.shard_map,
        mesh=mesh,
        in_specs=(spec, P("dp"), P("dp")),
        out_specs=(spec, P()),
        check_vma=False,
    )
    def train_step(p: dict, x: jax.Array, y: jax.Array) -> tuple[dict, jax.Array]:
        loss, g = jax.value_and_grad(loss_fn)(p, x, y)
        g = {k: jax.lax.pmean(v, "dp") for k, v in g.items()}
        return {k: p[k] - 0.1 * g[k] for k in p}, jax.lax.pmean(loss, "dp")

    params = {
        "w1": jnp.zeros((D, H)),
        "b1": jnp.zeros((H,)),
        "w2": jnp.zeros((H, H)),
        "b2": jnp.zeros((H,)),
        "w3": jnp.zeros((H, D)),
        "b3": jnp.zeros((D,)),
    }
    batch = NamedSharding(mesh, P("dp"))
    x = jax.device_put(jnp.ones((N * B, D)), batch)
    y = jax.device_put(jnp.zeros((N * B, D)), batch)
    lowered = jax.jit(train_step).lower(params, x, y)
    module = lowered.compiler_ir("stablehlo")
    text = module.operation.get_asm(print_generic_op_form=True, enable_debug_info=False)
    with open(os.path.join(out_dir, "dp_mlp.stablehlo.generic.mlir"), "w") as f:
        f.write(text)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
