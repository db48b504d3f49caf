"""`comm.all_to_allv` with counts of any leading rank: verifier, in-process reference, MPI.

Counts of shape `data.shape[:r]` (1 <= r < data rank) say how many leading rows along axis r
of each `data[g, i1, ..]` move. The in-process executor is checked against a plain loop over
every (sender, receiver, index) written here, and the MPI executor (`mpiexec -n 2` / `-n 4`)
against the in-process one, bit for bit.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_runtime_mpi import error_lines, mpirun

from lancet_mlir.runtime import execute
from lancet_mlir.runtime.collectives import CollectiveError, all_to_allv, check_counts
from lancet_mlir.runtime.loader import parse_module_text
from lancet_mlir.runtime.results import save_npz
from lancet_mlir.support.errors import UserError


def loop_reference(datas: list[np.ndarray], counts: list[np.ndarray]) -> tuple[list, list]:
    """Member i's chunk j = member j's chunk i, rows past the count zeroed (one index at a time)."""
    size, r = len(datas), counts[0].ndim
    out_d = [np.zeros_like(d) for d in datas]
    out_c = [np.zeros_like(c) for c in counts]
    for i in range(size):
        for j in range(size):
            for idx in np.ndindex(counts[j].shape[1:]):
                n = int(counts[j][(i, *idx)])
                out_d[i][(j, *idx)][:n] = datas[j][(i, *idx)][:n]
                out_c[i][(j, *idx)] = n
    assert all(d.shape[r] >= 0 for d in datas)
    return out_d, out_c


def random_exchange(rng: np.random.Generator, size: int, shape: tuple[int, ...], r: int):
    """Random data (nonzero everywhere, so a moved zero would show) and counts of rank r,
    with 0 and the full row count forced in."""
    datas = [rng.integers(1, 100, size=(size, *shape)).astype(np.float32) for _ in range(size)]
    rows = shape[r - 1]
    counts = [rng.integers(0, rows + 1, size=(size, *shape[: r - 1])).astype(np.int64)
              for _ in range(size)]  # fmt: skip
    counts[0].reshape(-1)[0] = 0
    counts[-1].reshape(-1)[-1] = rows
    return datas, counts


@settings(max_examples=40, deadline=None)
@given(size=st.sampled_from([2, 3, 4]), r=st.sampled_from([1, 2]), seed=st.integers(0, 2**16),
       rest=st.lists(st.integers(1, 3), min_size=2, max_size=3))  # fmt: skip
def test_in_process_equals_the_loop_reference(
    size: int, r: int, seed: int, rest: list[int]
) -> None:
    datas, counts = random_exchange(np.random.default_rng(seed), size, tuple(rest), r)
    got_d, got_c = all_to_allv(datas, counts)
    ref_d, ref_c = loop_reference(datas, counts)
    for g, e in zip(got_d + got_c, ref_d + ref_c, strict=True):
        assert g.dtype == e.dtype
        np.testing.assert_array_equal(g, e)
    # sending back what arrived, with the counts that arrived, returns the valid rows home
    back_d, back_c = all_to_allv(got_d, got_c)
    for m in range(size):
        np.testing.assert_array_equal(back_c[m], counts[m])
        np.testing.assert_array_equal(back_d[m], ref_reflect(datas[m], counts[m]))


def ref_reflect(data: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """`data` with every row past its count zeroed."""
    out = np.zeros_like(data)
    for idx in np.ndindex(counts.shape):
        out[idx][: int(counts[idx])] = data[idx][: int(counts[idx])]
    return out


def test_rank_two_counts_hand_computed() -> None:
    # 2 members, data [G=2, E=2, C=2] (one element per row), counts [G, E]
    d0 = np.arange(1, 9, dtype=np.float32).reshape(2, 2, 2)  # chunk g, expert e, row c
    d1 = np.arange(11, 19, dtype=np.float32).reshape(2, 2, 2)
    c0 = np.array([[2, 0], [1, 2]])
    c1 = np.array([[0, 1], [2, 1]])
    (o0, o1), (n0, n1) = all_to_allv([d0, d1], [c0, c1])
    # member 0 gets member 0's chunk 0 ([[1,2],[3,4]] with counts [2,0]) and member 1's chunk 0
    # ([[11,12],[13,14]] with counts [0,1])
    np.testing.assert_array_equal(o0, [[[1, 2], [0, 0]], [[0, 0], [13, 0]]])
    np.testing.assert_array_equal(n0, [[2, 0], [0, 1]])
    # member 1 gets member 0's chunk 1 ([[5,6],[7,8]], [1,2]) and member 1's ([[15,16],[17,18]], [2,1])
    np.testing.assert_array_equal(o1, [[[5, 0], [7, 8]], [[15, 16], [17, 0]]])
    np.testing.assert_array_equal(n1, [[1, 2], [2, 1]])


@pytest.mark.parametrize(
    ("counts", "message"),
    [
        (np.array([[1, -1], [0, 0]]), r"count -1 is outside \[0, 2\]"),
        (np.array([[1, 3], [0, 0]]), r"count 3 is outside \[0, 2\]"),
        (np.array([1, 1, 1]), r"counts must have shape \(2,\) .*got \(3,\)"),
        (np.array([[1, 1, 1], [1, 1, 1]]), r"counts must have shape \(2,\) or \(2, 2\) .*got \(2, 3\)"),
        (np.zeros((2, 2, 2), np.int64), r"counts must have shape \(2,\) or \(2, 2\) .*got \(2, 2, 2\)"),
        (np.array([[1.0, 1.0], [0.0, 0.0]]), "counts must be integers"),
    ],
)  # fmt: skip
def test_bad_counts_are_one_clear_error(counts: np.ndarray, message: str) -> None:
    with pytest.raises(CollectiveError, match=message):
        check_counts(np.zeros((2, 2, 2), np.float32), counts, 2)


VERIFY_BAD = """
%d = "test.op"() : () -> tensor<2x3x4xf32>
%c = "test.op"() : () -> tensor<2x4xi64>
%v, %vc = comm.all_to_allv %d, %c : (tensor<2x3x4xf32>, tensor<2x4xi64>) -> (tensor<2x3x4xf32>, tensor<2x4xi64>)
"""


def test_verifier_names_the_expected_count_shapes() -> None:
    with pytest.raises(UserError) as err:
        parse_module_text(VERIFY_BAD)
    assert "count operand #0 must be tensor<2xi64> or tensor<2x3xi64>-like" in str(err.value)
    good = VERIFY_BAD.replace("2x4xi64", "2x3xi64")
    parse_module_text(good)  # counts [G, E] of data [G, E, C] verify


def module_text(world: int) -> str:
    """One fused all_to_allv: an r = 1 pair [W, 3, 2] f32 and an r = 2 pair [W, 2, 3, 2] f16."""
    d1, c1 = f"tensor<{world}x3x2xf32>", f"tensor<{world}xi64>"
    d2, c2 = f"tensor<{world}x2x3x2xf16>", f"tensor<{world}x2xi64>"
    return (
        f"builtin.module attributes {{lancet.world_size = {world} : i64}} {{\n"
        f"  func.func @main(%a: {d1}, %b: {d2}, %n: {c1}, %m: {c2}) -> ({d1}, {d2}, {c1}, {c2}) {{\n"
        f"    %x, %y, %xn, %ym = comm.all_to_allv %a, %b, %n, %m : ({d1}, {d2}, {c1}, {c2}) -> "
        f"({d1}, {d2}, {c1}, {c2})\n"
        f"    func.return %x, %y, %xn, %ym : {d1}, {d2}, {c1}, {c2}\n  }}\n}}\n"
    )


def mpi_inputs(world: int, seed: int) -> dict[int, list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    a, n = random_exchange(rng, world, (3, 2), 1)
    b, m = random_exchange(rng, world, (2, 3, 2), 2)
    return {r: [a[r], b[r].astype(np.float16), n[r], m[r]] for r in range(world)}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("world", [2, 4])
def test_mpi_equals_in_process(tmp_path: Path, world: int) -> None:
    text = module_text(world)
    (tmp_path / "m.mlir").write_text(text)
    inputs = mpi_inputs(world, seed=world)
    save_npz(str(tmp_path / "in.npz"),
             {f"rank{r}/{i}": v for r, vs in inputs.items() for i, v in enumerate(vs)})  # fmt: skip
    expected = execute(parse_module_text(text).module, ranks=world, inputs=inputs)
    args = [str(tmp_path / "m.mlir"), "--inputs", str(tmp_path / "in.npz"), "--save",
            str(tmp_path / "out.npz")]  # fmt: skip
    proc = mpirun(world, *args)
    assert proc.returncode == 0, proc.stderr
    with np.load(tmp_path / "out.npz") as out:
        for r in range(world):
            for i, want in enumerate(expected.outputs[r]):
                got = out[f"rank{r}/{i}"]
                assert got.dtype == want.dtype
                np.testing.assert_array_equal(got, want, err_msg=f"rank {r} result {i}")
    # rank 1 sends a count past the rows: every rank stops with one line naming it
    inputs[1][3][0, 0] = 4
    save_npz(str(tmp_path / "in.npz"),
             {f"rank{r}/{i}": v for r, vs in inputs.items() for i, v in enumerate(vs)})  # fmt: skip
    proc = mpirun(world, *args)
    assert proc.returncode != 0
    lines = error_lines(proc.stderr)
    assert len(lines) == 1
    assert lines[0].startswith("lancet-run: error: rank 1: ")
    assert "all_to_allv count 4 is outside [0, 3]" in lines[0]
