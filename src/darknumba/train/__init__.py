"""Training applications: detector and classifier loops, evaluation (mAP), per-layer timing."""
