"""The problems the harness is asked about: the suite registry (`suite`: a folder of problems, a suite file, or names;
the registry the service names problems from) and the reference's interface shown to a model (`interface`)."""
