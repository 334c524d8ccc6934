"""GoEmotions tags of ED utterances: tagging cache, emotion-interaction patterns, pattern subsets."""
