import pytest

from judgeflow.sampling.power import min_detectable_rise


def test_the_detectable_rise_shrinks_with_the_sample_and_respects_the_rule():
    small = min_detectable_rise(50, 350, 0.05, alpha=0.01)
    large = min_detectable_rise(5000, 35000, 0.05, alpha=0.01)
    assert small > large > 0
    # (z_0.99 + z_0.8) * sqrt(p(1-p)(1/n+1/m))
    assert large == pytest.approx((2.3263 + 0.8416) * (0.05 * 0.95 * (1 / 5000 + 1 / 35000)) ** 0.5, rel=1e-3)
    assert min_detectable_rise(5000, 35000, 0.05, alpha=0.01, min_increase=0.02) == 0.02
    assert min_detectable_rise(10, 70, 0.05, alpha=0.01, min_samples=50) is None
