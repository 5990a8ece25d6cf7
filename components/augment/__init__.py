"""Augment: image augmentation and minority oversampling of the train split."""
