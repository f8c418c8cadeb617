-- The bilingual site of the demo (scripts/demo.sh) and of the capture tests: Thai columns and
-- English columns in one table, one watch per language. tests/golden/ holds the statements
-- these two watches generate; the tests check that the demo watches exactly this.
CREATE TABLE pages (
  id serial PRIMARY KEY, slug text, category text,
  title text, body text, title_en text, body_en text,
  status text NOT NULL DEFAULT 'draft', noindex boolean NOT NULL DEFAULT false,
  sort_order int, is_featured boolean, keywords text,
  created_at timestamptz DEFAULT now(), updated_at timestamptz DEFAULT now(), published_at timestamptz);
SELECT indexnow_watch('pages', url => 'https://www.example.com/th/{slug}',
  visible => $$status = 'published' AND NOT noindex$$,
  ignore => '{sort_order,is_featured,keywords,created_at,updated_at,title_en,body_en}',
  publish_at => 'published_at');
SELECT indexnow_watch('pages', url => 'https://www.example.com/en/{slug}',
  visible => $$status = 'published' AND NOT noindex AND title_en IS NOT NULL$$,
  ignore => '{sort_order,is_featured,keywords,created_at,updated_at,title,body}',
  hidden_reason => 'untranslated', publish_at => 'published_at');
