"""What a person's words ask for: the vocabulary, referring expressions resolved in a
scene (colour, shape, size, places as the person sees them, objects next to others,
exclusions), and a dialogue's memory for corrections. Pure Python + numpy: the simulator's
scoring, the evaluator and the nodes share it."""
