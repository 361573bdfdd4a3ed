#!/usr/bin/env bash
# Check the links of the project's Markdown: every relative link names a file
# or directory of the repository, and every #anchor a heading of the page it
# points to (GitHub's anchors: lower case, punctuation dropped, spaces to
# dashes).  Links to other sites are not followed.  Exits 1 if any is broken.
#   scripts/checklinks.sh            README.md, docs/*.md, bench/README.md
#   scripts/checklinks.sh FILE...    these files
set -euo pipefail
cd "$(dirname "$0")/.."
files=("$@")
[ ${#files[@]} -eq 0 ] && files=(README.md docs/*.md bench/README.md)

exec perl - "${files[@]}" <<'PERL'
use strict;
use warnings;
use File::Basename qw(dirname);
use File::Spec;

my %anchors;    # file -> { anchor => 1 }
sub anchors_of {
    my ($file) = @_;
    return $anchors{$file} if $anchors{$file};
    my %a;
    my %seen;
    open my $fh, '<', $file or return $anchors{$file} = {};
    my $fence = 0;
    while (<$fh>) {
        $fence = !$fence if /^\s*```/;
        next if $fence || !/^#{1,6}\s+(.*?)\s*$/;
        my $h = lc $1;
        $h =~ s/[^\w\- ]//g;    # GitHub drops punctuation but - and _
        $h =~ s/ /-/g;
        my $n = $seen{$h}++;
        $a{$n ? "$h-$n" : $h} = 1;
    }
    return $anchors{$file} = \%a;
}

my $bad = 0;
for my $file (@ARGV) {
    open my $fh, '<', $file or do { print "$file: cannot read\n"; $bad = 1; next };
    my $fence = 0;
    while (my $line = <$fh>) {
        my $ln = $.;
        $fence = !$fence if $line =~ /^\s*```/;
        next if $fence;
        $line =~ s/`[^`]*`//g;    # code spans hold no links
        while ($line =~ /\]\(([^)\s]+)\)/g) {
            my $link = $1;
            next if $link =~ m{^[a-z][a-z0-9+.-]*:}i;    # http:, mailto:, ...
            my ($path, $anchor) = split /#/, $link, 2;
            my $target = $path eq ''
                ? $file
                : File::Spec->canonpath(dirname($file) . "/$path");
            if (!-e $target) {
                print "$file:$ln: $link: no such file\n";
                $bad = 1;
                next;
            }
            next unless defined $anchor && $anchor ne '' && $target =~ /\.md$/;
            if (!anchors_of($target)->{$anchor}) {
                print "$file:$ln: $link: no such heading in $target\n";
                $bad = 1;
            }
        }
    }
}
exit $bad;
PERL
