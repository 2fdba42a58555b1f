"""A toy cache target that lives outside Crucible's tree: the plugin seam's test copies this folder to a
temporary directory and declares it by an entry point, as an installed package would."""
