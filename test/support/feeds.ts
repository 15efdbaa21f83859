/** An RSS feed of a channel at `link` whose items are enclosures (or, with `link: true`, a page's URL yt-dlp lists as it is). */
export function rssFeed(
  title: string,
  link: string,
  items: Array<{ title: string; url: string; link?: boolean }>,
): string {
  const item = (it: { title: string; url: string; link?: boolean }, i: number) =>
    `<item><title>${it.title}</title>` +
    (it.link ? `<link>${it.url}</link>` : `<enclosure url="${it.url}" type="audio/mpeg" length="1"/>`) +
    `<guid>${i + 1}</guid></item>\n`;
  return (
    `<?xml version="1.0" encoding="UTF-8"?>\n<rss version="2.0"><channel><title>${title}</title>` +
    `<link>${link}</link>\n${items.map(item).join('')}</channel></rss>\n`
  );
}
