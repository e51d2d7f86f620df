"""Image I/O, Darknet's resize/letterbox, augmentation, the detection pipeline, drawing."""
