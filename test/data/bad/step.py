"""A lancet-torch script of the bad-input corpus: its make_step raises."""


def make_step():
    raise RuntimeError("boom")
