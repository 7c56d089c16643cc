"""Measurements on trained models beyond attacks: HSIC (Tables 1, 8, 9)."""
