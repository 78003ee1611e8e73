return { view(ARGV[2], true) }
