"""Pictures of episodes for people (GIF of the camera view with the predicted path, plots)."""
