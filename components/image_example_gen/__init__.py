"""ImageExampleGen: folders of images (span-N/<class name>/*.png|jpg) -> Examples."""
