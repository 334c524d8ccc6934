"""Data readers: EmpatheticDialogues raw/clean, GoEmotions, and the emotion taxonomies."""
