//! Counts of integer values in bounded memory (ported from transfer/histogram.py).
