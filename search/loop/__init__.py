"""The search loop: the program database, the schedule, novelty, and the instances a run is scored on."""
