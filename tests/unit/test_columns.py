"""Column helpers: the fast paths must give what the plain numpy/pandas calls give."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tracelens.columns import unique_rows

small = st.integers(-3, 40)
wide = st.sampled_from([-(2**62), -5, 0, 7, 2**40, 2**62 - 1])   # spans that cannot be packed into one int64


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 4).flatmap(lambda k: st.one_of(
    hnp.arrays(np.int64, st.tuples(st.integers(0, 30), st.just(k)), elements=small),
    hnp.arrays(np.int64, st.tuples(st.integers(0, 30), st.just(k)), elements=wide))))
def test_unique_rows_is_numpys_axis0_unique(keys):
    uniq, first, inverse = unique_rows(keys)
    want_u, want_f, want_i = np.unique(keys, axis=0, return_index=True, return_inverse=True)
    assert uniq.tolist() == want_u.tolist()
    assert first.tolist() == want_f.tolist()
    assert inverse.tolist() == want_i.reshape(-1).tolist()
