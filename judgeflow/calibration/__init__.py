"""Calibration: how well the judge agrees with human labels (`judgeflow calibrate`)."""
