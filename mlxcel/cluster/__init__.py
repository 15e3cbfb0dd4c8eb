"""Engine replicas on Ray Serve behind one HTTP endpoint (`mlxcel serve --replicas N`)."""
